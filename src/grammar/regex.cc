// The regex parser: pattern -> expression tree (ebnf.h), lowered with a character encoding (plain UTF-8, or
// JSON string escapes). Positions in messages are byte offsets into the pattern. Anchors are checked here:
// ^ only before anything that consumes text, $ only after everything that does.
#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "common/error.h"
#include "grammar/ebnf.h"

namespace m3::grammar {

namespace {

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodeRanges kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

// What one escape or class member stands for.
struct Atom {
  CodeRanges set;
  bool single = false;  // one code point (a range endpoint in a class)
  uint32_t cp = 0;
};

Atom one(uint32_t cp) {
  return {{{cp, cp}}, true, cp};
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view pattern) : s_(pattern) {}

  Expr parse() {
    size_t dollar = kNone;
    Expr e = parse_alternatives(true, &dollar);
    if (pos_ < s_.size()) error("unbalanced ')'", pos_);
    return e;
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  [[noreturn]] void error(const std::string& what, size_t at) const {
    fail(ErrorKind::kInvalidArgument, "regex: " + what + " at offset " + std::to_string(at));
  }
  [[noreturn]] void unsupported(const std::string& what, size_t at) const {
    fail(ErrorKind::kInvalidArgument,
         "regex: " + what + " at offset " + std::to_string(at) + " is not supported");
  }

  bool peek(std::string_view text) const { return s_.substr(pos_, text.size()) == text; }

  // `at_start`: nothing that consumes text can precede this point (so ^ is allowed). *dollar: the offset of
  // a $ that ends one of the alternatives, kNone if none does; the caller refuses anything after it.
  Expr parse_alternatives(bool at_start, size_t* dollar) {
    Expr alt;
    alt.kind = Expr::kAlt;
    alt.items.push_back(parse_sequence(at_start, dollar));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      size_t d = kNone;
      alt.items.push_back(parse_sequence(at_start, &d));
      if (*dollar == kNone) *dollar = d;
    }
    return alt.items.size() == 1 ? std::move(alt.items[0]) : alt;
  }

  Expr parse_sequence(bool at_start, size_t* dollar) {
    Expr seq;
    bool quantified = false;  // the last item already carries a quantifier
    *dollar = kNone;
    while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      const size_t at = pos_;
      if (*dollar != kNone) unsupported("anchor $ before the end of the pattern", *dollar);
      int32_t min = 0, max = 0;
      if (parse_quantifier(&min, &max)) {
        if (seq.items.empty()) error("nothing to repeat before '" + std::string(1, s_[at]) + "'", at);
        if (quantified) error("quantifier '" + std::string(1, s_[at]) + "' follows another quantifier", at);
        if (pos_ < s_.size() && s_[pos_] == '?') ++pos_;  // lazy: the same language
        Expr rep;
        rep.kind = Expr::kRepeat;
        rep.min = min;
        rep.max = max;
        rep.items.push_back(std::move(seq.items.back()));
        seq.items.back() = std::move(rep);
        quantified = true;
        continue;
      }
      if (s_[pos_] == '^') {
        if (!at_start || !seq.items.empty()) unsupported("anchor ^ after the start of the pattern", at);
        ++pos_;
        continue;
      }
      if (s_[pos_] == '$') {
        *dollar = pos_++;
        continue;
      }
      quantified = false;
      size_t inner_dollar = kNone;
      seq.items.push_back(parse_atom(at_start && seq.items.empty(), &inner_dollar));
      if (inner_dollar != kNone) *dollar = inner_dollar;
    }
    return seq;
  }

  // * + ? or a well-formed {m} {m,} {m,n} {,n}; anything else (a lone '{') is left for a literal.
  bool parse_quantifier(int32_t* min, int32_t* max) {
    const char c = s_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      *min = c == '+' ? 1 : 0;
      *max = c == '?' ? 1 : -1;
      return true;
    }
    if (c != '{') return false;
    const size_t at = pos_;
    size_t i = pos_ + 1;
    auto number = [&]() -> int64_t {
      if (i >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i]))) return -1;
      int64_t v = 0;
      while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) {
        v = v * 10 + (s_[i++] - '0');
        if (v > kMaxRepeatBound) error("repetition bound exceeds " + std::to_string(kMaxRepeatBound), at);
      }
      return v;
    };
    const int64_t lo = number();
    int64_t hi = lo;
    bool comma = false;
    if (i < s_.size() && s_[i] == ',') {
      ++i;
      comma = true;
      hi = number();
    }
    if (i >= s_.size() || s_[i] != '}' || (lo < 0 && hi < 0) || (!comma && lo < 0)) return false;
    pos_ = i + 1;
    *min = static_cast<int32_t>(std::max<int64_t>(lo, 0));
    *max = static_cast<int32_t>(hi);
    if (*max >= 0 && *max < *min) error("bad repetition bounds " + std::string(s_.substr(at, pos_ - at)), at);
    return true;
  }

  Expr parse_atom(bool at_start, size_t* dollar) {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '(') return parse_group(at_start, dollar);
    if (c == '[') return Expr::code_points(parse_class());
    if (c == '.') {
      ++pos_;
      return Expr::code_points({{0, '\n' - 1}, {'\n' + 1, 0x10FFFF}});
    }
    if (c == '\\') return Expr::code_points(parse_escape(false).set);
    uint32_t cp = 0;
    if (!next_code_point(s_, &pos_, &cp)) error("invalid UTF-8", at);
    return Expr::code_points({{cp, cp}});
  }

  Expr parse_group(bool at_start, size_t* dollar) {
    const size_t at = pos_++;
    if (peek("?")) {
      if (peek("?:")) {
        pos_ += 2;
      } else if (peek("?=")) {
        unsupported("lookahead (?=...)", at);
      } else if (peek("?!")) {
        unsupported("negative lookahead (?!...)", at);
      } else if (peek("?<=")) {
        unsupported("lookbehind (?<=...)", at);
      } else if (peek("?<!")) {
        unsupported("negative lookbehind (?<!...)", at);
      } else if (peek("?P=")) {
        unsupported("backreference (?P=name)", at);
      } else if (peek("?<") || peek("?P<")) {  // a named group: a plain group here
        pos_ += peek("?<") ? 2 : 3;
        const size_t name_at = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
          ++pos_;
        if (pos_ == name_at || pos_ >= s_.size() || s_[pos_] != '>') error("bad group name", name_at);
        ++pos_;
      } else if (peek("?#")) {
        unsupported("comment group (?#...)", at);
      } else {
        unsupported("inline flags or group (" + std::string(s_.substr(pos_, 2)) + "...)", at);
      }
    }
    if (++depth_ > kMaxNesting) error("groups nested deeper than " + std::to_string(kMaxNesting), at);
    Expr inner = parse_alternatives(at_start, dollar);
    if (pos_ >= s_.size() || s_[pos_] != ')') error("unclosed '('", at);
    ++pos_;
    --depth_;
    return inner;
  }

  uint32_t hex(size_t count, size_t at) {
    if (pos_ + count > s_.size()) error("escape needs " + std::to_string(count) + " hex digits", at);
    uint32_t v = 0;
    for (size_t i = 0; i < count; ++i, ++pos_) {
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (!std::isxdigit(c)) error("escape needs " + std::to_string(count) + " hex digits", at);
      v = v * 16 + (std::isdigit(c) ? c - '0' : std::tolower(c) - 'a' + 10);
    }
    return v;
  }

  // After "\u": 4 hex digits (a UTF-16 surrogate pair \uD83D\uDE00 is one code point) or {H...}.
  uint32_t unicode_escape(size_t at) {
    uint32_t cp = 0;
    if (peek("{")) {
      const size_t close = s_.find('}', pos_);
      if (close == std::string_view::npos || close == pos_ + 1 || close - pos_ - 1 > 6)
        error("bad escape \\u{...}", at);
      ++pos_;
      cp = hex(close - pos_, at);
      ++pos_;
    } else {
      cp = hex(4, at);
      if (cp >= 0xD800 && cp <= 0xDBFF && peek("\\u")) {
        const size_t save = pos_;
        pos_ += 2;
        const uint32_t low = hex(4, save);
        if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        pos_ = save;
      }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) error("lone surrogate escape", at);
    if (cp > 0x10FFFF) error("escape beyond U+10FFFF", at);
    return cp;
  }

  Atom parse_escape(bool in_class) {
    const size_t at = pos_++;
    if (pos_ >= s_.size()) error("pattern ends with a lone backslash", at);
    const char e = s_[pos_];
    if (!std::isalnum(static_cast<unsigned char>(e))) {  // escaped punctuation (or any non-ASCII) is literal
      uint32_t cp = 0;
      if (!next_code_point(s_, &pos_, &cp)) error("invalid UTF-8", pos_);
      return one(cp);
    }
    ++pos_;
    switch (e) {
      case 'd':
        return {kDigit};
      case 'D':
        return {complement(kDigit)};
      case 'w':
        return {kWord};
      case 'W':
        return {complement(kWord)};
      case 's':
        return {kSpace};
      case 'S':
        return {complement(kSpace)};
      case 'n':
        return one('\n');
      case 't':
        return one('\t');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'x':
        return one(hex(2, at));
      case 'u':
        return one(unicode_escape(at));
      case 'U': {
        const uint32_t cp = hex(8, at);
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) error("bad escape \\U", at);
        return one(cp);
      }
      case '0':
        if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
          unsupported("octal escape \\0" + std::string(1, s_[pos_]), at);
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        unsupported("word boundary \\b", at);
      case 'B':
        unsupported("word boundary \\B", at);
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        unsupported("anchor \\" + std::string(1, e), at);
      case 'k':
        unsupported("named backreference \\k", at);
      case 'p':
      case 'P':
        unsupported("Unicode property escape \\" + std::string(1, e), at);
      case 'c':
        unsupported("control escape \\c", at);
      default:
        if (std::isdigit(static_cast<unsigned char>(e)))
          unsupported("backreference \\" + std::string(1, e), at);
        error("unknown escape \\" + std::string(1, e), at);
    }
  }

  Atom class_member(size_t open) {
    if (pos_ >= s_.size()) error("unterminated character class '['", open);
    if (s_[pos_] == '\\') return parse_escape(true);
    const size_t at = pos_;
    uint32_t cp = 0;
    if (!next_code_point(s_, &pos_, &cp)) error("invalid UTF-8", at);
    return one(cp);
  }

  // [...] / [^...]; a range with a class escape at either end (as in [\d-z]) keeps '-' literal (ECMAScript).
  CodeRanges parse_class() {
    const size_t open = pos_++;
    const bool negated = peek("^");
    if (negated) ++pos_;
    if (peek("]") && !negated) error("empty character class [] matches nothing", open);
    CodeRanges set;
    while (!peek("]")) {
      const size_t at = pos_;
      Atom lo = class_member(open);
      set.insert(set.end(), lo.set.begin(), lo.set.end());
      if (!peek("-") || pos_ + 1 >= s_.size() || s_[pos_ + 1] == ']') continue;
      ++pos_;
      Atom hi = class_member(open);
      if (lo.single && hi.single) {
        if (hi.cp < lo.cp) error("bad character range " + std::string(s_.substr(at, pos_ - at)), at);
        set.emplace_back(lo.cp, hi.cp);
      } else {
        set.emplace_back('-', '-');
        set.insert(set.end(), hi.set.begin(), hi.set.end());
      }
    }
    ++pos_;
    return negated ? complement(set) : normalize(std::move(set));
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

Symbol add(Grammar& g, std::string_view pattern, std::string_view name, const CharEncoding& encoding) {
  std::vector<ExprRule> rules(1);
  rules[0].name = name.empty() ? "regex" : std::string(name);
  rules[0].body = RegexParser(pattern).parse();
  return Grammar::ref(lower_rules(g, rules, encoding)[0]);
}

CharEncoding json_string_encoding() {
  CharEncoding e;
  static const char* hex = "0123456789abcdef";
  for (uint32_t c = 0; c < 0x20; ++c) e.escapes[c] = std::string("\\u00") + hex[c >> 4] + hex[c & 15];
  e.escapes['\b'] = "\\b";
  e.escapes['\f'] = "\\f";
  e.escapes['\n'] = "\\n";
  e.escapes['\r'] = "\\r";
  e.escapes['\t'] = "\\t";
  e.escapes['"'] = "\\\"";
  e.escapes['\\'] = "\\\\";
  return e;
}

}  // namespace

Symbol add_regex(Grammar& g, std::string_view pattern, std::string_view name) {
  return add(g, pattern, name, CharEncoding{});
}

Symbol add_regex_json_string_body(Grammar& g, std::string_view pattern, std::string_view name) {
  static const CharEncoding encoding = json_string_encoding();
  return add(g, pattern, name, encoding);
}

Grammar regex_grammar(std::string_view pattern) {
  Grammar g;
  g.set_root(add_regex(g, pattern, "root").index);
  g.validate();
  return g;
}

}  // namespace m3::grammar
