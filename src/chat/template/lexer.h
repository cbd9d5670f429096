// Jinja lexer in HF's environment (trim_blocks, lstrip_blocks, `{%-`/`-%}` whitespace control, raw blocks).
// Invariants: tokens are what Jinja 3.1's lexer yields (newlines normalised to "\n", one trailing newline
// dropped, comments removed, whitespace control applied to text tokens); each carries its 1-based line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace m3::jinja {

enum class TokType {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokType type;
  std::string text;  // text data, name, decoded string literal, or operator spelling
  int64_t ival = 0;
  double fval = 0;
  int line = 0;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace m3::jinja
