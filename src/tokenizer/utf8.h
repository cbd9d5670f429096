// UTF-8 helpers shared by the tokenizer: strict validation (encode input), code point iteration, and a
// resumable lossy decoder that reproduces Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid
// subpart). Feeding bytes in any chunking yields the same text as feeding them at once; that is what keeps
// the incremental detokenizer's output identical to decode().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace m3::tok {

// Returns the byte offset of the first ill-formed sequence, or npos when `s` is well-formed UTF-8.
size_t find_invalid_utf8(std::string_view s);

// Decodes the code point starting at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(char32_t cp, std::string& out);

// The White_Space property (what Rust's char::is_whitespace and Oniguruma's Unicode \s test).
bool is_unicode_whitespace(char32_t cp);

class Utf8LossyDecoder {
 public:
  // Appends to `out` all text that the bytes fed so far determine; keeps a trailing sequence that more
  // bytes could still complete.
  void feed(std::string_view bytes, std::string& out);
  // End of input: a held incomplete sequence becomes one U+FFFD.
  void finish(std::string& out);
  bool has_pending() const { return pending_len_ > 0; }

 private:
  uint8_t pending_[4] = {};
  int pending_len_ = 0;
  int needed_ = 0;  // total length of the sequence begun in pending_
};

// Whole-buffer convenience: lossy-decodes `bytes` (no state carried over).
std::string utf8_lossy(std::string_view bytes);

}  // namespace m3::tok
