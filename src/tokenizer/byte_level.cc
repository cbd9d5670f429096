// Byte-level alphabet tables, built once at static-initialisation time from the GPT-2 rule.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

bool maps_to_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point; the alphabet ends at U+0143
  Tables() {
    to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = maps_to_itself(b) ? static_cast<char32_t>(b) : next_extra++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return tables().to_char[b];
}

int char_to_byte(char32_t cp) {
  return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1;
}

std::string byte_level_spelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_char(static_cast<uint8_t>(c)), out);
  return out;
}

void append_token_bytes(std::string_view token, std::string& out) {
  const size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    int b = char_to_byte(next_code_point(token, i));
    if (b < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

}  // namespace m3::tok
