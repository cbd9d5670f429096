// GBNF / xgrammar EBNF text -> grammar (grammar.h), and the expression tree both text front ends (this one
// and regex.h) build before lowering. Lowering owns the IR's one hard rule: a repeated item never matches
// the empty string, so a nullable item X is repeated as X' (X without its empty string): X* = X'*,
// X{m,n} = X'{0,n}; X' is built for any X, through groups and (nullable) rule references alike.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace m3::grammar {

// Parses llama.cpp GBNF (also xgrammar's EBNF): `name ::= body` rules (a body runs until the next
// `name ::=`), `|`, `( )`, "..." and '...' strings, [...] and [^...] classes, `.` (any code point), postfix
// * + ? {m} {m,} {m,n} {,n}, `#` comments. Escapes: \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH and any
// escaped punctuation; every character is a Unicode code point matched as its UTF-8 bytes. Rules may be
// used before they are defined. Throws kInvalidArgument naming the problem and its line:column.
Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

// Largest repetition bound and group nesting the text front ends accept (pathological-input guards).
inline constexpr int kMaxRepeatBound = 100000;
inline constexpr int kMaxNesting = 100;

// --- the expression tree shared with the regex front end ---

// Inclusive code point ranges.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;
// Sorted, merged ranges.
CodeRanges normalize(CodeRanges ranges);
// Every code point in [0, 0x10FFFF] outside `ranges` (normalized).
CodeRanges complement(const CodeRanges& ranges);
// Decodes the UTF-8 code point at text[*pos] and advances *pos; false (pos unchanged) on malformed bytes.
bool next_code_point(std::string_view text, size_t* pos, uint32_t* cp);

struct Expr {
  enum Kind : uint8_t { kSeq, kAlt, kChars, kRef, kRepeat };
  Kind kind = kSeq;           // an empty kSeq is the empty string
  std::vector<Expr> items;    // kSeq, kAlt: the parts; kRepeat: the one repeated item
  CodeRanges chars;           // kChars: one code point out of these (normalized)
  int32_t rule = -1;          // kRef: index into the rule list given to lower_rules
  int32_t min = 0, max = -1;  // kRepeat; max < 0: unbounded

  static Expr code_points(CodeRanges ranges) {
    Expr e;
    e.kind = kChars;
    e.chars = normalize(std::move(ranges));
    return e;
  }
};

struct ExprRule {
  std::string name;
  Expr body;
};

// How a matched code point is written in the output: these code points as the given bytes, every other one
// as its UTF-8 encoding (regex.h uses it for text inside a JSON string).
struct CharEncoding {
  std::map<uint32_t, std::string> escapes;
};

// Adds one grammar rule per ExprRule, in order (names may get a suffix when taken), plus the helper rules
// they need; returns the rule ids.
std::vector<int32_t> lower_rules(Grammar& g, const std::vector<ExprRule>& rules,
                                 const CharEncoding& encoding);

}  // namespace m3::grammar
