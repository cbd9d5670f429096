// Python `str` semantics over UTF-8 bytes (see text_util.h). Unicode tables come from utf8proc; Python's full
// case mappings ("ß".upper() == "SS") are approximated by utf8proc's simple ones, which differ only there.
#include "chat/template/text_util.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

namespace m3::jinja::text {

char32_t decode(std::string_view s, size_t& i) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 && b0 < 0xF5 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC2 && b0 < 0xE0 ? 1 : 0;
  if (n == 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return b0;
  }
  char32_t cp = b0 & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Reject overlong three/four-byte forms and surrogates so that re-encoding is the identity.
  if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
    ++i;
    return b0;
  }
  i += n + 1;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Invalid bytes decode to 0x80..0xFF; writing them back as raw bytes keeps arbitrary input byte-identical.
static void append_cp(std::string& out, char32_t cp, bool raw_byte) {
  if (raw_byte) {
    out += static_cast<char>(cp);
  } else {
    append_utf8(out, cp);
  }
}

namespace {
struct Cp {
  char32_t cp;
  bool raw;  // an undecodable byte, copied back as is
};
std::vector<Cp> decode_all(std::string_view s) {
  std::vector<Cp> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t cp = decode(s, i);
    out.push_back({cp, cp >= 0x80 && i - start == 1});
  }
  return out;
}
std::string encode(const std::vector<Cp>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) append_cp(out, cps[k].cp, cps[k].raw);
  return out;
}
utf8proc_category_t category(char32_t cp) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}
}  // namespace

std::vector<char32_t> to_code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(decode(s, i));
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end && k < cps.size(); ++k) append_utf8(out, cps[k]);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) decode(s, i);
  return n;
}

bool is_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_alpha(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool is_digit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return category(cp) == UTF8PROC_CATEGORY_ND;
}

bool is_alnum(char32_t cp) {
  if (is_alpha(cp) || is_digit(cp)) return true;
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_printable(char32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp < 0x7F;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<Cp> cps = decode_all(s);
  std::vector<char32_t> set;
  if (chars) set = to_code_points(*chars);
  auto strippable = [&](char32_t cp) {
    if (!chars) return is_space(cp);
    for (char32_t c : set)
      if (c == cp) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b].cp)) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1].cp)) --e;
  return encode(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::vector<Cp> cps = decode_all(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i].cp)) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // Python keeps the remainder as is, trailing whitespace included.
      out.push_back(encode(cps, i, n));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j].cp)) ++j;
    out.push_back(encode(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::vector<Cp> cps = decode_all(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && is_space(cps[j - 1].cp)) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode(cps, 0, j));
        break;
      }
      size_t i = j;
      while (i > 0 && !is_space(cps[i - 1].cp)) --i;
      out.push_back(encode(cps, i, j));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::vector<Cp> cps = decode_all(s);
  size_t start = 0, i = 0, n = cps.size();
  while (i < n) {
    char32_t c = cps[i].cp;
    bool brk = !cps[i].raw && (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                               c == 0x85 || c == 0x2028 || c == 0x2029);
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + ((c == '\r' && i + 1 < n && cps[i + 1].cp == '\n') ? 2 : 1);
    out.push_back(encode(cps, start, keepends ? eol : i));
    start = i = eol;
  }
  if (start < n) out.push_back(encode(cps, start, n));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` at every code-point boundary, both ends included.
    std::vector<Cp> cps = decode_all(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (k < cps.size()) append_cp(out, cps[k].cp, cps[k].raw);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {
template <typename F>
std::string map_cps(std::string_view s, F&& f) {
  if (is_ascii(s)) {
    std::string out(s);
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<char>(f(static_cast<char32_t>(out[k]), k));
    return out;
  }
  std::vector<Cp> cps = decode_all(s);
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < cps.size(); ++k) {
    if (cps[k].raw) {
      out += static_cast<char>(cps[k].cp);
    } else {
      append_utf8(out, f(cps[k].cp, k));
    }
  }
  return out;
}
char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  if (c < 0x80) return to_upper(c);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}
}  // namespace

std::string upper(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t) { return to_upper(c); });
}
std::string lower(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t) { return to_lower(c); });
}
std::string capitalize(std::string_view s) {
  return map_cps(s, [](char32_t c, size_t k) { return k == 0 ? to_title(c) : to_lower(c); });
}

std::string title_filter(std::string_view s) {
  // Jinja splits on runs of [-\s({\[<] and upper-cases the first character of every piece.
  bool word_start = true;
  return map_cps(s, [&](char32_t c, size_t) {
    char32_t r = word_start ? to_upper(c) : to_lower(c);
    word_start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
    return r;
  });
}

bool is_upper_str(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = decode(s, i);
    auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LU) cased = true;
  }
  return cased;
}

bool is_lower_str(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = decode(s, i);
    auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LL) cased = true;
  }
  return cased;
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = decode(s, i);
    bool raw = c >= 0x80 && i - start == 1;
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (raw || !is_printable(c)) {
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's 'r' layout: positional when -4 < exponent10 < 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out += '-';
    p = 1;
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = p; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp10 = std::stoi(sci.substr(epos + 1));
  int decpt = exp10 + 1;
  int nd = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += eb;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= nd) {
    out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

}  // namespace m3::jinja::text
