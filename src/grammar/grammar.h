// The grammar every structured-output front end compiles to (JSON schema, regex, EBNF, choice, tool calls):
// a context-free grammar over BYTES. A rule is a list of alternatives; an alternative is a sequence of
// symbols; a symbol is one byte out of a set, or a reference to a rule. Options and groups are helper rules
// (the builder below); repetition is a rule of its own kind, item{min,max}, that the Earley matcher
// (grammar/matcher.h) counts natively: one item per byte however long the run, and bounds like maxLength
// 524288 cost nothing to compile.
//
// Front ends emit UTF-8 text as its bytes: a character class beyond ASCII becomes alternatives of multi-byte
// sequences (utf8_class below), so every accepted string is valid UTF-8 when the class and literals are.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace m3::grammar {

// A set of bytes (256 bits).
class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
  static ByteSet all() { return range(0, 255); }
  void add(uint8_t b) { bits_[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits_[i] |= o.bits_[i];
  }
  bool has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  int count() const;
  ByteSet complement() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.bits_[i] = ~bits_[i];
    return s;
  }
  bool operator==(const ByteSet& o) const { return bits_ == o.bits_; }
  bool operator<(const ByteSet& o) const { return bits_ < o.bits_; }

 private:
  std::array<uint64_t, 4> bits_{};
};

struct Symbol {
  enum Kind : uint8_t { kBytes, kRule };
  Kind kind = kBytes;
  int32_t index = 0;  // Grammar::byte_sets() index (kBytes) or rule id (kRule)
  bool operator==(const Symbol& o) const { return kind == o.kind && index == o.index; }
  bool operator<(const Symbol& o) const { return std::pair(kind, index) < std::pair(o.kind, o.index); }
};

using Sequence = std::vector<Symbol>;

// A counted repetition: the rule matches `item` (a rule id) between min and max times (max < 0: unbounded).
struct Repeat {
  int32_t item = -1;
  int32_t min = 0, max = -1;
};

struct Rule {
  std::string name;                    // for messages and dumps; unique within the grammar
  std::vector<Sequence> alternatives;  // an empty Sequence is the empty string; unused by a repetition
  Repeat repeat;                       // repeat.item >= 0: this rule is that repetition
  bool is_repeat() const { return repeat.item >= 0; }
};

class Grammar {
 public:
  // Rules are created first and given their alternatives later, so they may refer to themselves or to rules
  // defined after them. `name` is made unique (a numeric suffix) when taken.
  int32_t add_rule(std::string_view name);
  void add_alternative(int32_t rule, Sequence alternative);
  void set_root(int32_t rule) { root_ = rule; }

  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Rule& rule(int32_t id) const { return rules_.at(id); }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  const ByteSet& byte_set(int32_t index) const { return byte_sets_.at(index); }
  // The rule id called `name`, or -1.
  int32_t find_rule(std::string_view name) const;

  // --- symbols and sequences ---
  Symbol bytes(const ByteSet& set);  // interned: equal sets share an index
  static Symbol ref(int32_t rule) { return {Symbol::kRule, rule}; }
  Sequence literal(std::string_view text);  // one single-byte symbol per byte
  // Any one UTF-8 encoded code point in [lo, hi] (lo <= hi <= 0x10FFFF, surrogates excluded): appends to
  // `out` the alternatives (each a byte Sequence) that together match exactly those encodings.
  void utf8_range(uint32_t lo, uint32_t hi, std::vector<Sequence>* out);

  // --- helper rules (each returns a symbol referring to a new rule named after `name`) ---
  // A rule with these alternatives; identical alternative lists made through intern() share one rule.
  Symbol intern(std::string_view name, std::vector<Sequence> alternatives);
  Symbol choice(std::string_view name, std::vector<Sequence> alternatives) {
    return intern(name, std::move(alternatives));
  }
  Symbol optional(std::string_view name, Sequence item);  // item | ""
  // item{min,max} (max < 0: unbounded) as a repetition rule; the item becomes a rule of this repetition alone
  // (a lone reference to a defined rule is copied). Equal repetitions share one rule.
  Symbol repeat(std::string_view name, Sequence item, int min, int max);
  Symbol star(std::string_view name, Sequence item) { return repeat(name, std::move(item), 0, -1); }
  Symbol plus(std::string_view name, Sequence item) { return repeat(name, std::move(item), 1, -1); }

  // Throws m3::Error(kInvalidArgument) when the grammar has no root, a rule has no alternatives, a symbol
  // refers outside the grammar, a repetition's item derives the empty string (ambiguous counts) or a rule can
  // never derive a finite string.
  void validate() const;
  // GBNF-style text of every rule (root first): stable, for tests, logs and cache keys.
  std::string to_string() const;

 private:
  std::vector<Rule> rules_;
  std::vector<ByteSet> byte_sets_;
  std::map<ByteSet, int32_t> byte_set_index_;
  std::map<std::vector<Sequence>, int32_t> interned_;
  std::map<std::tuple<std::vector<Sequence>, int32_t, int32_t>, int32_t> repeats_;
  std::map<std::string, int32_t, std::less<>> by_name_;
  int32_t root_ = -1;
};

}  // namespace m3::grammar
