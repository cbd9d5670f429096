// Helpers shared by the chat-template tests: fixture loading (paths relative to the repository root, where
// ctest runs the tests) and a string comparison that reports the first differing byte with context.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace m3::test {

inline bool file_exists(const std::string& path) {
  return std::ifstream(path).good();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_file(path));
}

inline std::string escape_for_log(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// Byte-exact comparison; on mismatch names the first differing offset and shows 60 bytes around it.
inline ::testing::AssertionResult same_bytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  size_t from = k > 60 ? k - 60 : 0;
  return ::testing::AssertionFailure()
         << "first difference at byte " << k << " (got " << got.size() << " bytes, want " << want.size()
         << ")\n  got:  ..." << escape_for_log(got.substr(from, 120)) << "\n  want: ..."
         << escape_for_log(want.substr(from, 120));
}

}  // namespace m3::test
