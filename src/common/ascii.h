// ASCII helpers shared by the text parsers: whitespace as C's isspace sees it in the "C" locale, trimming,
// lower-casing. Locale-free and header-only.
#pragma once

#include <string>
#include <string_view>

namespace m3 {

inline bool ascii_is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

inline std::string_view ascii_trim(std::string_view s) {
  while (!s.empty() && ascii_is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && ascii_is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

}  // namespace m3
