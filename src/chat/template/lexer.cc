// Tokenizer mirroring Jinja's regex lexer rule by rule (see lexer.h). The subtle part is whitespace: `{%-`
// strips all Unicode whitespace before a tag, lstrip_blocks strips spaces/tabs between a line start and a
// block or comment tag, trim_blocks eats one "\n" after `%}`/`#}`, `-%}` eats all whitespace after it.
#include "chat/template/lexer.h"

#include <cstdio>

#include "chat/template/text_util.h"
#include "chat/template/value.h"

namespace m3::jinja {
namespace {

bool is_name_start(unsigned char c) {
  return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0x80;
}
bool is_name_char(unsigned char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_dec(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_), line_);
        advance(n);
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < n && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : std::string::npos;
      std::string text = src_.substr(pos_, tag - pos_);
      apply_left_strip(text, sign, kind != '{');
      int text_line = line_;
      emit_text(std::move(text), text_line);
      advance(tag);
      line_starting_ = false;
      if (raw_end != std::string::npos) {
        lex_raw(raw_end);
      } else if (kind == '#') {
        lex_comment(tag + 2 + (sign ? 1 : 0));
      } else {
        lex_tag(kind, tag + 2 + (sign ? 1 : 0));
      }
    }
    out_.push_back({TokType::kEof, "", 0, 0, line_});
    return std::move(out_);
  }

 private:
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;

  [[noreturn]] void fail(const std::string& msg, int line) { throw TemplateError(msg, line); }

  void advance(size_t to) {
    for (size_t k = pos_; k < to; ++k)
      if (src_[k] == '\n') ++line_;
    pos_ = to;
  }

  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return std::string::npos;
  }

  // Length of a run of Python whitespace starting at p.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      char32_t cp = text::decode(src_, q);
      if (!text::is_space(cp)) break;
      p = q;
    }
    return p;
  }

  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  void apply_left_strip(std::string& text, char sign, bool lstrip_applies) {
    if (sign == '-') {
      text = text::strip(text, nullptr, false, true);
    } else if (sign != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool only_blank = text.find_first_not_of(" \t", l_pos) == std::string::npos;
        if (only_blank) text.resize(l_pos);
      }
    }
  }

  void emit_text(std::string text, int line) {
    if (!text.empty()) out_.push_back({TokType::kText, std::move(text), 0, 0, line});
  }

  // End of a `{% raw %}` opening tag at `tag`, or npos when the block tag is something else.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (!at(p, "raw")) return std::string::npos;
    p = skip_space(p + 3);
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2;
    return std::string::npos;
  }

  void lex_raw(size_t body) {
    int start_line = line_;
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    advance(body);
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t p = q + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      p = skip_space(p);
      if (!at(p, "endraw")) continue;
      p = skip_space(p + 6);
      size_t end;
      if (at(p, "+%}")) {
        end = p + 3;
      } else if (at(p, "-%}")) {
        end = skip_space(p + 3);
      } else if (at(p, "%}")) {
        end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      std::string text = src_.substr(body, q - body);
      apply_left_strip(text, sign, true);
      emit_text(std::move(text), line_);
      advance(end);
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    fail("Missing end of raw directive", start_line);
  }

  void lex_comment(size_t p) {
    int start_line = line_;
    for (; p < src_.size(); ++p) {
      size_t end;
      if (at(p, "+#}")) {
        end = p + 3;
      } else if (at(p, "-#}")) {
        end = skip_space(p + 3);
      } else if (at(p, "#}")) {
        end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      advance(end);
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    fail("Missing end of comment tag", start_line);
  }

  void lex_tag(char kind, size_t p) {
    bool block = kind == '%';
    out_.push_back({block ? TokType::kBlockBegin : TokType::kVarBegin, "", 0, 0, line_});
    advance(p);
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size()) fail("unexpected end of template", line_);
      // Like Jinja, a closing delimiter only counts when no bracket is open: `{{ {'a': {'b': 1}} }}`.
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (at(pos_, "+%}")) {
            end = pos_ + 3;
          } else if (at(pos_, "-%}")) {
            end = skip_space(pos_ + 3);
          } else if (at(pos_, "%}")) {
            end = pos_ + 2 + (at(pos_ + 2, "\n") ? 1 : 0);
          }
        } else if (at(pos_, "-}}")) {
          end = skip_space(pos_ + 3);
        } else if (at(pos_, "}}")) {
          end = pos_ + 2;
        }
        if (end != std::string::npos) {
          out_.push_back({block ? TokType::kBlockEnd : TokType::kVarEnd, "", 0, 0, line_});
          advance(end);
          line_starting_ = src_[end - 1] == '\n';
          return;
        }
      }
      size_t ws = skip_space(pos_);
      if (ws != pos_) {
        advance(ws);
        continue;
      }
      lex_token(brackets);
    }
  }

  // (\d+_)*\d+ at p; returns the end or npos.
  size_t digits(size_t p) const {
    if (p >= src_.size() || !is_dec(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && is_dec(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_dec(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  size_t float_end(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return std::string::npos;
    size_t q = digits(p);
    if (q == std::string::npos) return q;
    size_t frac = std::string::npos;
    if (q < src_.size() && src_[q] == '.') frac = digits(q + 1);
    size_t after = frac != std::string::npos ? frac : q;
    if (after < src_.size() && (src_[after] | 0x20) == 'e') {
      size_t e = after + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      size_t ed = digits(e);
      if (ed != std::string::npos) return ed;
    }
    return frac;
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s)
      if (c != '_') out += c;
    return out;
  }

  void lex_number(size_t p) {
    int line = line_;
    size_t fe = float_end(p);
    if (fe != std::string::npos) {
      std::string lit = without_underscores(std::string_view(src_).substr(p, fe - p));
      out_.push_back({TokType::kFloat, lit, 0, std::strtod(lit.c_str(), nullptr), line});
      advance(fe);
      return;
    }
    int base = 10;
    size_t q = p;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char b = static_cast<char>(src_[p + 1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 10;
    }
    auto ok_digit = [&](char c) {
      if (base == 16) return is_dec(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
      return c >= '0' && c < static_cast<char>('0' + base);
    };
    if (base != 10) {
      size_t r = p + 2;
      size_t last = r;
      while (r < src_.size()) {
        if (src_[r] == '_' && r + 1 < src_.size() && ok_digit(src_[r + 1])) ++r;
        if (r < src_.size() && ok_digit(src_[r])) {
          last = ++r;
        } else {
          break;
        }
      }
      if (last == p + 2) base = 10;  // "0x" without digits lexes as 0 followed by a name
      q = last;
    }
    if (base == 10) {
      q = p + 1;
      bool zero = src_[p] == '0';
      while (q < src_.size()) {
        size_t r = q + (src_[q] == '_' ? 1 : 0);
        if (r < src_.size() && (zero ? src_[r] == '0' : is_dec(src_[r]))) {
          q = r + 1;
        } else {
          break;
        }
      }
    }
    std::string lit = without_underscores(std::string_view(src_).substr(p, q - p));
    const char* digits_begin = lit.c_str() + (base == 10 ? 0 : 2);
    errno = 0;
    char* endp = nullptr;
    unsigned long long v = std::strtoull(digits_begin, &endp, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail("integer literal " + lit + " is too large", line);
    out_.push_back({TokType::kInt, lit, static_cast<int64_t>(v), 0, line});
    advance(q);
  }

  void lex_string(size_t p) {
    int line = line_;
    char quote = src_[p];
    size_t q = p + 1;
    std::string val;
    while (true) {
      if (q >= src_.size()) fail("unexpected char '" + std::string(1, quote) + "'", line);
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        val += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) fail("unexpected char '" + std::string(1, quote) + "'", line);
      q = decode_escape(q + 1, val, line);
    }
    out_.push_back({TokType::kString, std::move(val), 0, 0, line});
    advance(q + 1);
  }

  // Python "unicode-escape" decoding of the escape whose letter is at q; returns the position after it.
  size_t decode_escape(size_t q, std::string& out, int line) {
    char e = src_[q];
    auto hex_escape = [&](int ndig) {
      char32_t cp = 0;
      for (int k = 1; k <= ndig; ++k) {
        char h = q + k < src_.size() ? src_[q + k] : 0;
        int d = is_dec(h) ? h - '0' : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) fail("truncated \\" + std::string(1, e) + " escape in string literal", line);
        cp = cp * 16 + static_cast<char32_t>(d);
      }
      if (cp > 0x10FFFF) fail("illegal Unicode character in string literal", line);
      text::append_utf8(out, cp);
      return q + 1 + static_cast<size_t>(ndig);
    };
    switch (e) {
      case '\n':
        return q + 1;
      case '\\':
      case '\'':
      case '"':
        out += e;
        return q + 1;
      case 'a':
        out += '\a';
        return q + 1;
      case 'b':
        out += '\b';
        return q + 1;
      case 'f':
        out += '\f';
        return q + 1;
      case 'n':
        out += '\n';
        return q + 1;
      case 'r':
        out += '\r';
        return q + 1;
      case 't':
        out += '\t';
        return q + 1;
      case 'v':
        out += '\v';
        return q + 1;
      case 'x':
        return hex_escape(2);
      case 'u':
        return hex_escape(4);
      case 'U':
        return hex_escape(8);
      default:
        break;
    }
    if (e >= '0' && e <= '7') {
      char32_t cp = 0;
      size_t r = q;
      while (r < q + 3 && r < src_.size() && src_[r] >= '0' && src_[r] <= '7')
        cp = cp * 8 + (src_[r++] - '0');
      text::append_utf8(out, cp);
      return r;
    }
    if (static_cast<unsigned char>(e) >= 0x80) {
      // Jinja backslash-escapes non-ASCII before decoding, so "\é" yields the four characters "\xe9".
      size_t r = q;
      char32_t cp = text::decode(src_, r);
      char buf[16];
      std::snprintf(buf, sizeof buf,
                    cp < 0x100     ? "\\x%02x"
                    : cp < 0x10000 ? "\\u%04x"
                                   : "\\U%08x",
                    static_cast<unsigned>(cp));
      out += buf;
      return r;
    }
    out += '\\';
    out += e;
    return q + 1;
  }

  void lex_token(std::vector<char>& brackets) {
    size_t p = pos_;
    auto c = static_cast<unsigned char>(src_[p]);
    if (is_dec(static_cast<char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(static_cast<unsigned char>(src_[q]))) ++q;
      out_.push_back({TokType::kName, src_.substr(p, q - p), 0, 0, line_});
      advance(q);
      return;
    }
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (at(p, op)) {
        out_.push_back({TokType::kOp, op, 0, 0, line_});
        advance(p + 2);
        return;
      }
    }
    static const std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(static_cast<char>(c)) == std::string_view::npos) {
      fail("unexpected char " + text::repr(std::string(1, static_cast<char>(c))) + " at " + std::to_string(p),
           line_);
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail("unexpected '" + std::string(1, static_cast<char>(c)) + "'", line_);
      if (brackets.back() != static_cast<char>(c))
        fail("unexpected '" + std::string(1, static_cast<char>(c)) + "', expected '" +
                 std::string(1, brackets.back()) + "'",
             line_);
      brackets.pop_back();
    }
    out_.push_back({TokType::kOp, std::string(1, static_cast<char>(c)), 0, 0, line_});
    advance(p + 1);
  }
};

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  // keep_trailing_newline=False: one final newline is not part of the template.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace m3::jinja
