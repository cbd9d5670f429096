// IncrementalDetokenizer: the same per-id byte table and resumable lossy UTF-8 decoder that decode() uses,
// fed one id at a time; sharing both is what makes streamed and one-shot output identical.
#include "tokenizer/incremental_detokenizer.h"

namespace m3 {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  std::string out;
  if (skip_special_tokens_ && tok_.is_special(id)) return out;
  decoder_.feed(tok_.token_bytes(id), out);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  decoder_.finish(out);
  return out;
}

}  // namespace m3
