// UTF-8 and Python `str` semantics for the interpreter: code-point indexing, Python's whitespace,
// strip/split/ splitlines, case mapping, repr() of strings and floats. Invariants: any bytes are accepted (an
// invalid UTF-8 byte counts as one code point and is copied through unchanged) and nothing here throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace m3::jinja::text {

// Decodes the code point at s[i], advancing i. Invalid or truncated sequences yield the single byte
// (0x80..0xFF).
char32_t decode(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
std::vector<char32_t> to_code_points(std::string_view s);
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end);
bool is_ascii(std::string_view s);
size_t length(std::string_view s);  // in code points, as Python len()

// Python str.isspace() for one code point (the set `\s` matches in Python's `re` for str patterns).
bool is_space(char32_t cp);
bool is_alpha(char32_t cp);
bool is_digit(char32_t cp);
bool is_alnum(char32_t cp);
bool is_printable(char32_t cp);  // str.isprintable(): decides what repr() escapes

// str.strip / lstrip / rstrip; `chars == nullptr` strips Python whitespace.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / rsplit; `sep == nullptr` splits on whitespace runs. maxsplit < 0 means no limit.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);    // str.capitalize()
std::string title_filter(std::string_view s);  // Jinja's `title` filter (word starts after -, space, ( { [ <)
bool is_upper_str(std::string_view s);         // str.isupper()
bool is_lower_str(std::string_view s);         // str.islower()

std::string repr(std::string_view s);  // Python repr() of a str, quotes included
std::string float_repr(double d);      // Python repr() of a float: "1.0", "1e-05", "inf"

}  // namespace m3::jinja::text
