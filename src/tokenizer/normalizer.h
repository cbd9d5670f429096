// The tokenizer.json "normalizer" section: null, NFC/NFD/NFKC/NFKD (utf8proc, held to the Unicode 9.0
// repertoire HF's normalizers use), or a Sequence of those. Any other type fails at load time with
// kUnsupported naming normalizer.type. Input and output are valid UTF-8; normalize() is thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

class Normalizer {
 public:
  // `section` is the JSON value of "normalizer" (may be null); `path` names the file in errors.
  static Normalizer from_json(const nlohmann::json& section, const std::string& path);

  bool is_identity() const { return steps_.empty(); }
  // Writes the normalized form of `in` to `out` (replacing its contents).
  void normalize(std::string_view in, std::string& out) const;

  // Whether `cp` is a starter that normalization leaves alone whatever surrounds it: combining class 0, no
  // decomposition of any kind (Hangul syllables included), and never the second part of a composition. For
  // text a + b where the last code point of a and the first two of b are such starters, normalize(a + b) ==
  // normalize(a) + normalize(b), and those three code points stay where they were (parallel_encode.h relies
  // on it). Always true for the identity normalizer; always false for a Sequence of several forms, whose
  // steps could compose across what one step left.
  bool is_inert_starter(char32_t cp) const;

 private:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };
  static void add_steps(const nlohmann::json& section, const std::string& path, std::vector<Form>& steps);
  static void apply(Form form, std::string_view in, std::string& out);
  static void map(Form form, std::string_view in, std::string& out);
  std::vector<Form> steps_;
};

}  // namespace m3::tok
