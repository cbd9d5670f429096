// The GBNF / EBNF parser (text -> expression tree, positions as line:column) and the lowering of expression
// trees to grammar rules shared with the regex front end. Lowering keeps every repeated item non-nullable by
// building X' = X minus the empty string (nonempty_alternatives) instead of refusing nullable items.
#include "grammar/ebnf.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace m3::grammar {

CodeRanges normalize(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (const auto& [lo, hi] : ranges) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

CodeRanges complement(const CodeRanges& ranges) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalize(ranges)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

bool next_code_point(std::string_view text, size_t* pos, uint32_t* cp) {
  size_t i = *pos;
  if (i >= text.size()) return false;
  const auto b0 = static_cast<uint8_t>(text[i]);
  const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > text.size()) return false;
  uint32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(text[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  *cp = c;
  *pos = i + n;
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Lowering

namespace {

class Lowering {
 public:
  Lowering(Grammar& g, const std::vector<ExprRule>& rules, const CharEncoding& encoding)
      : g_(g), rules_(rules), encoding_(encoding) {}

  std::vector<int32_t> run() {
    analyze();
    for (const ExprRule& r : rules_) ids_.push_back(g_.add_rule(r.name));
    for (size_t r = 0; r < rules_.size(); ++r) {
      const Expr& body = rules_[r].body;
      if (body.kind == Expr::kAlt)
        for (const Expr& alt : body.items) g_.add_alternative(ids_[r], lower(alt, rules_[r].name));
      else
        g_.add_alternative(ids_[r], lower(body, rules_[r].name));
    }
    // Nonempty variants of nullable rules, made on demand (each may ask for more).
    for (size_t i = 0; i < pending_.size(); ++i) {
      const int32_t r = pending_[i];
      for (Sequence& alt : nonempty_alternatives(rules_[r].body, rules_[r].name))
        g_.add_alternative(nonempty_ids_.at(r), std::move(alt));
    }
    return ids_;
  }

 private:
  // Per rule: derives the empty string (least fixed point) and derives nothing but it (greatest).
  void analyze() {
    rule_nullable_.assign(rules_.size(), 0);
    rule_empty_only_.assign(rules_.size(), 1);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        const char n = nullable(rules_[r].body), e = empty_only(rules_[r].body);
        if (n != rule_nullable_[r] || e != rule_empty_only_[r]) {
          rule_nullable_[r] = n;
          rule_empty_only_[r] = e;
          changed = true;
        }
      }
    }
  }

  bool nullable(const Expr& e) const {
    switch (e.kind) {
      case Expr::kSeq:
        return std::all_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return nullable(x); });
      case Expr::kAlt:
        return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return nullable(x); });
      case Expr::kChars:
        return false;
      case Expr::kRef:
        return rule_nullable_[e.rule];
      case Expr::kRepeat:
        return e.min == 0 || nullable(e.items[0]);
    }
    return false;
  }

  // The language is {""} (or nothing at all): no nonempty variant exists.
  bool empty_only(const Expr& e) const {
    switch (e.kind) {
      case Expr::kSeq:
      case Expr::kAlt:
        return std::all_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return empty_only(x); });
      case Expr::kChars:
        return false;
      case Expr::kRef:
        return rule_empty_only_[e.rule];
      case Expr::kRepeat:
        return e.max == 0 || empty_only(e.items[0]);
    }
    return false;
  }

  // Alternatives as one symbol run: inlined when there is one, else a helper rule.
  Sequence one(std::vector<Sequence> alts, const std::string& name) {
    if (alts.size() == 1) return std::move(alts[0]);
    if (alts.empty()) return {g_.bytes(ByteSet())};  // matches nothing
    return {g_.choice(name, std::move(alts))};
  }

  // One code point out of `ranges`, written as encoding_ says; single-byte alternatives share one set.
  std::vector<Sequence> chars(const CodeRanges& ranges) {
    std::vector<Sequence> raw;
    for (const auto& [lo, hi] : ranges) {
      uint32_t next = lo;
      for (auto it = encoding_.escapes.lower_bound(lo); it != encoding_.escapes.end() && it->first <= hi;
           ++it) {
        if (next < it->first) g_.utf8_range(next, it->first - 1, &raw);
        raw.push_back(g_.literal(it->second));
        next = it->first + 1;
      }
      if (next <= hi) g_.utf8_range(next, hi, &raw);
    }
    ByteSet single;
    std::vector<Sequence> out(1);
    for (Sequence& s : raw) {
      if (s.size() == 1)
        single.add(g_.byte_set(s[0].index));
      else
        out.push_back(std::move(s));
    }
    if (single.empty())
      out.erase(out.begin());
    else
      out[0] = {g_.bytes(single)};
    return out;
  }

  Sequence lower(const Expr& e, const std::string& name) {
    switch (e.kind) {
      case Expr::kSeq: {
        Sequence out;
        for (const Expr& x : e.items) {
          Sequence part = lower(x, name);
          out.insert(out.end(), part.begin(), part.end());
        }
        return out;
      }
      case Expr::kAlt: {
        std::vector<Sequence> alts;
        for (const Expr& x : e.items) alts.push_back(lower(x, name));
        return one(std::move(alts), name + "_alt");
      }
      case Expr::kChars:
        return one(chars(e.chars), name + "_char");
      case Expr::kRef:
        return {Grammar::ref(ids_[e.rule])};
      case Expr::kRepeat:
        return lower_repeat(e, name);
    }
    return {};
  }

  // item{min,max}; a run of runs, (y{1,}){min,} with min <= 1, is y{min,}: nesting would only add ambiguity.
  Symbol repeat(const std::string& name, Sequence item, int32_t min, int32_t max) {
    if (max < 0 && min <= 1 && item.size() == 1 && item[0].kind == Symbol::kRule) {
      const Rule& r = g_.rule(item[0].index);
      if (r.is_repeat() && r.repeat.min == 1 && r.repeat.max < 0)
        return g_.repeat(name + "_rep", {Grammar::ref(r.repeat.item)}, min, -1);
    }
    return g_.repeat(name + "_rep", std::move(item), min, max);
  }

  Sequence lower_repeat(const Expr& e, const std::string& name) {
    const Expr& item = e.items[0];
    if (e.max == 0) return {};
    if (e.min == 1 && e.max == 1) return lower(item, name);
    if (e.min == 0 && e.max == 1) return {g_.optional(name + "_opt", lower(item, name))};
    if (!nullable(item)) return {repeat(name, lower(item, name), e.min, e.max)};
    // item{m,n} with a nullable item is item'{0,n}: the empty pieces pad the count.
    std::vector<Sequence> alts = nonempty_alternatives(item, name);
    if (alts.empty()) return {};
    return {repeat(name, one(std::move(alts), name + "_alt"), 0, e.max)};
  }

  // Alternatives matching exactly the nonempty strings of e (none when e matches only "").
  std::vector<Sequence> nonempty_alternatives(const Expr& e, const std::string& name) {
    if (empty_only(e)) return {};
    if (!nullable(e)) return {lower(e, name)};
    std::vector<Sequence> out;
    switch (e.kind) {
      case Expr::kSeq: {
        // Every item may be empty: split on the first item that is not, x1' x2..xn | x2' x3..xn | ...
        // The tails x(i+1)..xn are shared through helper rules, so the size stays linear in n.
        Sequence tail;
        for (size_t i = e.items.size(); i-- > 0;) {
          std::vector<Sequence> heads = nonempty_alternatives(e.items[i], name);
          for (auto h = heads.rbegin(); h != heads.rend(); ++h) {
            h->insert(h->end(), tail.begin(), tail.end());
            out.push_back(std::move(*h));
          }
          if (i == 0) break;
          Sequence longer = lower(e.items[i], name);
          longer.insert(longer.end(), tail.begin(), tail.end());
          tail = longer.size() <= 2 ? std::move(longer)
                                    : Sequence{g_.intern(name + "_tail", {std::move(longer)})};
        }
        std::reverse(out.begin(), out.end());
        break;
      }
      case Expr::kAlt:
        for (const Expr& x : e.items)
          for (Sequence& s : nonempty_alternatives(x, name)) out.push_back(std::move(s));
        break;
      case Expr::kRef:
        out.push_back({Grammar::ref(nonempty_rule(e.rule))});
        break;
      case Expr::kRepeat: {
        // item{m,n} minus "" is item'{1,n} (item' = item when item is not nullable).
        std::vector<Sequence> alts = nonempty_alternatives(e.items[0], name);
        if (e.max == 1) return alts;
        out.push_back({repeat(name, one(std::move(alts), name + "_alt"), 1, e.max)});
        break;
      }
      case Expr::kChars:
        break;
    }
    return out;
  }

  int32_t nonempty_rule(int32_t r) {
    auto [it, inserted] = nonempty_ids_.emplace(r, -1);
    if (inserted) {
      it->second = g_.add_rule(rules_[r].name + "_nonempty");
      pending_.push_back(r);
    }
    return it->second;
  }

  Grammar& g_;
  const std::vector<ExprRule>& rules_;
  const CharEncoding& encoding_;
  std::vector<char> rule_nullable_, rule_empty_only_;
  std::vector<int32_t> ids_;
  std::map<int32_t, int32_t> nonempty_ids_;  // rule -> the rule id of its nonempty variant
  std::vector<int32_t> pending_;             // rules whose nonempty variant still needs its alternatives
};

}  // namespace

std::vector<int32_t> lower_rules(Grammar& g, const std::vector<ExprRule>& rules,
                                 const CharEncoding& encoding) {
  return Lowering(g, rules, encoding).run();
}

// ---------------------------------------------------------------------------------------------------------
// The EBNF parser

namespace {

bool is_name_start(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}
bool is_name_char(char c) {
  return is_name_start(c) || c == '.';
}

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : s_(text) {}

  Grammar parse(std::string_view root_rule) {
    skip_space();
    while (pos_ < s_.size()) {
      parse_rule();
      skip_space();
    }
    const auto root = index_.find(root_rule);
    if (root == index_.end() || defined_at_[root->second] == kNone)
      fail(ErrorKind::kInvalidArgument, "grammar: no rule named '" + std::string(root_rule) + "'");
    for (size_t r = 0; r < rules_.size(); ++r)
      if (defined_at_[r] == kNone) error("undefined rule '" + rules_[r].name + "'", first_use_[r]);
    Grammar g;
    const std::vector<int32_t> ids = lower_rules(g, rules_, CharEncoding{});
    g.set_root(ids[root->second]);
    g.validate();
    return g;
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  [[noreturn]] void error(const std::string& what, size_t at) const {
    const size_t line_start = at == 0 ? std::string_view::npos : s_.rfind('\n', at - 1);
    const size_t line = 1 + std::count(s_.begin(), s_.begin() + at, '\n');
    const size_t column = at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    fail(ErrorKind::kInvalidArgument,
         "grammar: " + what + " at " + std::to_string(line) + ":" + std::to_string(column));
  }

  static std::string describe(char c) {
    if (std::isprint(static_cast<unsigned char>(c))) return std::string("'") + c + "'";
    static const char* hex = "0123456789ABCDEF";
    const auto b = static_cast<uint8_t>(c);
    return std::string("byte 0x") + hex[b >> 4] + hex[b & 15];
  }

  // Blanks, newlines and comments.
  void skip_space() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  size_t name_end(size_t at) const {
    if (at >= s_.size() || !is_name_start(s_[at])) return at;
    while (at < s_.size() && is_name_char(s_[at])) ++at;
    return at;
  }

  // At `name ::=`: where the current rule's body ends.
  bool at_rule_start() const {
    size_t at = name_end(pos_);
    if (at == pos_) return false;
    while (at < s_.size() && (s_[at] == ' ' || s_[at] == '\t')) ++at;
    return s_.substr(at, 3) == "::=";
  }

  int32_t rule_index(std::string_view name, size_t at) {
    const auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    const auto id = static_cast<int32_t>(rules_.size());
    rules_.push_back({std::string(name), Expr{}});
    defined_at_.push_back(kNone);
    first_use_.push_back(at);
    index_.emplace(std::string(name), id);
    return id;
  }

  void parse_rule() {
    const size_t start = pos_;
    const size_t end = name_end(pos_);
    if (end == pos_) error("expected a rule name, found " + describe(s_[pos_]), pos_);
    const std::string_view name = s_.substr(start, end - start);
    pos_ = end;
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
    if (s_.substr(pos_, 3) != "::=")
      error("expected '::=' after rule name '" + std::string(name) + "'", pos_);
    pos_ += 3;
    const int32_t r = rule_index(name, start);
    if (defined_at_[r] != kNone) error("rule '" + std::string(name) + "' is defined twice", start);
    defined_at_[r] = start;
    skip_space();
    if (pos_ >= s_.size() || at_rule_start())
      error("rule '" + std::string(name) + "' has an empty body", pos_);
    rules_[r].body = parse_alternatives();
    if (pos_ < s_.size() && s_[pos_] == ')') error("unbalanced ')'", pos_);
  }

  Expr parse_alternatives() {
    Expr alt;
    alt.kind = Expr::kAlt;
    alt.items.push_back(parse_sequence());
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alt.items.push_back(parse_sequence());
    }
    return alt.items.size() == 1 ? std::move(alt.items[0]) : alt;
  }

  Expr parse_sequence() {
    Expr seq;
    int stacked = 0;  // postfix operators applied to the last element
    for (;;) {
      skip_space();
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      if (c == '|' || c == ')' || at_rule_start()) break;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.items.empty()) error("nothing to repeat before '" + std::string(1, c) + "'", pos_);
        if (depth_ + ++stacked > kMaxNesting)
          error("groups and repetition operators nested deeper than " + std::to_string(kMaxNesting), pos_);
        Expr rep;
        rep.kind = Expr::kRepeat;
        parse_postfix(&rep.min, &rep.max);
        rep.items.push_back(std::move(seq.items.back()));
        seq.items.back() = std::move(rep);
        continue;
      }
      stacked = 0;
      seq.items.push_back(parse_element());
    }
    return seq;
  }

  void parse_postfix(int32_t* min, int32_t* max) {
    const size_t at = pos_;
    const char c = s_[pos_++];
    if (c != '{') {
      *min = c == '+' ? 1 : 0;
      *max = c == '?' ? 1 : -1;
      return;
    }
    auto blanks = [&] {
      while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
    };
    auto number = [&]() -> int64_t {
      blanks();
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) return -1;
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        v = v * 10 + (s_[pos_++] - '0');
        if (v > kMaxRepeatBound) error("repetition bound exceeds " + std::to_string(kMaxRepeatBound), at);
      }
      blanks();
      return v;
    };
    const int64_t lo = number();
    int64_t hi = lo;
    bool comma = false;
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      comma = true;
      hi = number();
    }
    if (pos_ >= s_.size() || s_[pos_] != '}') error("unterminated repetition '{'", at);
    ++pos_;
    const std::string text(s_.substr(at, pos_ - at));
    if ((lo < 0 && hi < 0) || (!comma && lo < 0)) error("bad repetition bounds " + text, at);
    *min = static_cast<int32_t>(std::max<int64_t>(lo, 0));
    *max = static_cast<int32_t>(hi);
    if (*max >= 0 && *max < *min) error("bad repetition bounds " + text, at);
  }

  Expr parse_element() {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '"' || c == '\'') return parse_string(c);
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::code_points({{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++pos_;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '=') error("lookahead assertion (= ...) is not supported", at);
      if (++depth_ > kMaxNesting) error("groups nested deeper than " + std::to_string(kMaxNesting), at);
      Expr inner = parse_alternatives();
      if (pos_ >= s_.size() || s_[pos_] != ')') error("unclosed '('", at);
      ++pos_;
      --depth_;
      return inner;
    }
    const size_t end = name_end(pos_);
    if (end == pos_) error("unexpected " + describe(c), at);
    Expr ref;
    ref.kind = Expr::kRef;
    ref.rule = rule_index(s_.substr(at, end - at), at);
    pos_ = end;
    return ref;
  }

  uint32_t hex_digits(int n, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i, ++pos_) {
      const char c = pos_ < s_.size() ? s_[pos_] : '\0';
      const int d = std::isdigit(static_cast<unsigned char>(c))    ? c - '0'
                    : std::isxdigit(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                                   : -1;
      if (d < 0) error("escape needs " + std::to_string(n) + " hex digits", at);
      v = v * 16 + d;
    }
    return v;
  }

  // One character of a string or class: an escape or a UTF-8 code point. `open` is where the token began.
  uint32_t parse_char(size_t open, const char* what) {
    const size_t at = pos_;
    if (pos_ >= s_.size() || s_[pos_] == '\n') error(std::string("unterminated ") + what, open);
    if (s_[pos_] != '\\') {
      uint32_t cp = 0;
      if (!next_code_point(s_, &pos_, &cp)) error("invalid UTF-8", at);
      return cp;
    }
    ++pos_;
    if (pos_ >= s_.size()) error(std::string("unterminated ") + what, open);
    const char e = s_[pos_++];
    uint32_t cp = 0;
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'x':
        cp = hex_digits(2, at);
        break;
      case 'u':
        cp = hex_digits(4, at);
        break;
      case 'U':
        cp = hex_digits(8, at);
        break;
      default:
        if (std::ispunct(static_cast<unsigned char>(e)) || e == ' ') return static_cast<uint8_t>(e);
        error("unknown escape '\\" + std::string(1, e) + "'", at);
    }
    if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {  // a UTF-16 surrogate pair
      const size_t save = pos_;
      pos_ += 2;
      const uint32_t low = hex_digits(4, pos_ - 2);
      if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      pos_ = save;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) error("lone surrogate in escape", at);
    if (cp > 0x10FFFF) error("escape beyond U+10FFFF", at);
    return cp;
  }

  Expr parse_string(char quote) {
    const size_t open = pos_++;
    Expr seq;
    while (pos_ >= s_.size() || s_[pos_] != quote) {
      const uint32_t cp = parse_char(open, "string");
      seq.items.push_back(Expr::code_points({{cp, cp}}));
    }
    ++pos_;
    return seq;
  }

  Expr parse_class() {
    const size_t open = pos_++;
    const bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) ++pos_;
    CodeRanges ranges;
    while (pos_ >= s_.size() || s_[pos_] != ']') {
      const size_t at = pos_;
      const uint32_t lo = parse_char(open, "character class");
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char(open, "character class");
        if (hi < lo) error("bad character range " + std::string(s_.substr(at, pos_ - at)), at);
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (ranges.empty() && !negated) error("empty character class [] matches nothing", open);
    return Expr::code_points(negated ? complement(ranges) : ranges);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<ExprRule> rules_;
  std::vector<size_t> defined_at_, first_use_;
  std::map<std::string, int32_t, std::less<>> index_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) {
  return EbnfParser(text).parse(root_rule);
}

}  // namespace m3::grammar
