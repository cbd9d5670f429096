// m3::Tokenizer: loads a HF tokenizer.json (byte-level BPE) and reproduces HF `tokenizers` encode/decode
// exactly. A Tokenizer is a cheap, copyable handle to immutable shared state; every method is const and
// safe to call from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace m3 {

namespace tok {
class TokenizerImpl;
}

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory containing one. Throws m3::Error naming the file:
  // kNotFound (missing), kCorruptData (malformed JSON or fields), kUnsupported (a section type or option
  // this implementation does not provide).
  static Tokenizer load(const std::string& path);

  // Ids for `text`, exactly as HF's Tokenizer.encode(text).ids (no BOS/EOS are added). With parse_special
  // false, special added tokens are not recognised and their text is tokenized like any other (HF's
  // split_special_tokens); non-special added tokens are still matched. Throws kInvalidArgument when `text` is
  // not valid UTF-8. Texts of 256 KiB and more are encoded on several threads (as many as the hardware has,
  // or M3_TOKENIZER_THREADS; see tokenizer/parallel_encode.h), with the same result as on one.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // encode() on at most `threads` threads (1: the single-threaded path) instead of the default.
  std::vector<int32_t> encode_with_threads(std::string_view text, size_t threads,
                                           bool parse_special = true) const;

  // Text for `ids`, as HF's decode: bytes of every known id concatenated (special ids omitted when
  // skip_special_tokens), then invalid UTF-8 replaced by U+FFFD. Unknown ids are skipped, as in HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // added token or vocabulary spelling
  std::string id_to_token(int32_t id) const;                         // "" if unknown
  bool is_special(int32_t id) const;                                 // an added token marked "special"
  size_t vocab_size() const;                                         // max id + 1

  // The raw bytes `id` contributes to decoded text (may be an incomplete UTF-8 sequence); empty for unknown
  // ids. Valid as long as any copy of this Tokenizer lives.
  std::string_view token_bytes(int32_t id) const;
  // Whether `id` names a vocabulary entry or an added token.
  bool is_known(int32_t id) const;
  // Ids of all added tokens, ascending.
  std::vector<int32_t> added_token_ids() const;
  // The tokenizer.json that was loaded.
  const std::string& path() const;
  // How many long text segments encode() took from its cache instead of tokenizing them (segment_cache.h).
  size_t segment_cache_hits() const;

 private:
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

}  // namespace m3
