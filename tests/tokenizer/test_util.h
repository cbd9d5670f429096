// Helpers shared by the tokenizer tests: the MiniMax-M3 tokenizer loaded once per test binary, the
// goldens, and a strict UTF-8 check for streamed chunks.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace m3::test {

inline constexpr const char* kM3TokenizerPath = "tests/fixtures/minimax-m3/tokenizer.json";
inline constexpr const char* kM3GoldensPath = "tests/fixtures/minimax-m3/goldens.json";
inline constexpr const char* kCorpusGoldensPath = "tests/fixtures/tokenizer/corpus_goldens.json";

inline const Tokenizer& m3_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(kM3TokenizerPath);
  return tok;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline bool valid_utf8(const std::string& s) {
  return tok::find_invalid_utf8(s) == std::string::npos;
}

// Text with control characters escaped, for failure messages.
inline std::string printable(const std::string& s, size_t limit = 200) {
  return nlohmann::json(s.substr(0, limit)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace m3::test
