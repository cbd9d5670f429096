// Streaming detokenization: push ids one at a time and get back only text that is complete. Bytes of a
// UTF-8 sequence split across tokens are held until the sequence completes (or proves invalid, which yields
// U+FFFD exactly where decode() puts one), so the concatenation of every push() and the final flush() equals
// Tokenizer::decode(all ids, same skip_special_tokens), and no returned chunk is ever invalid UTF-8.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace m3 {

class IncrementalDetokenizer {
 public:
  // Keeps its own handle to the tokenizer's shared state, so `tok` need not outlive this object.
  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens);

  // Newly completed UTF-8 text (possibly empty).
  std::string push(int32_t id);
  // End of stream: held bytes of an unfinished sequence come out as one U+FFFD. The detokenizer can be
  // reused afterwards as if new.
  std::string flush();
  // Whether bytes of an unfinished UTF-8 sequence are being held back.
  bool has_pending() const { return decoder_.has_pending(); }

 private:
  Tokenizer tok_;
  bool skip_special_tokens_;
  tok::Utf8LossyDecoder decoder_;
};

}  // namespace m3
