// Regular expressions (the ECMAScript / Python `re` subset JSON Schema `pattern` and guided_regex use) ->
// grammar rules. The pattern always matches the WHOLE text: like xgrammar and outlines (and unlike JSON
// Schema's unanchored `pattern`), a leading ^ and a trailing $ are accepted and change nothing.
// Constructs beyond regular languages or this subset (backreferences, lookaround, \b, inline flags, anchors
// elsewhere) are refused with kInvalidArgument naming the construct and its byte offset.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace m3::grammar {

// Supported: literals, `.` (any code point but \n), [...] and [^...] classes with ranges, \d \D \w \W \s \S
// (ASCII meanings) in and out of classes, escapes \n \t \r \f \v \0 \xHH \uHHHH \u{H...} and escaped
// punctuation, ( ), (?: ), (?<name> ), (?P<name> ), |, quantifiers * + ? {m} {m,} {m,n} {,n} and their lazy
// forms. Nesting deeper than kMaxNesting or a bound above kMaxRepeatBound (ebnf.h) is refused.

// Adds rules to `g` and returns a symbol matching exactly the pattern's language, as UTF-8 text.
Symbol add_regex(Grammar& g, std::string_view pattern, std::string_view name = "regex");

// The same language, each character written as it must appear inside a JSON string literal: `"` as \",
// `\` as \\, U+0000..U+001F as \b \f \n \r \t or else \u00xx (lowercase hex); everything else as UTF-8.
Symbol add_regex_json_string_body(Grammar& g, std::string_view pattern, std::string_view name);

// A grammar whose root is the pattern (validated).
Grammar regex_grammar(std::string_view pattern);

}  // namespace m3::grammar
