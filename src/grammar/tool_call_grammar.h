// Grammar of a MiniMax-M3 tool-call block (serving-api.md §4.1) whose arguments follow each tool's
// `parameters` schema in the template's XML value encoding (OpenAI tool_choice required / named, Anthropic
// any / tool). The schema walk is json_schema.h's; this file holds the markup encoding, chosen so that the
// repo's parser (chat/parsers/tool_schema.cc) turns every accepted block into arguments the schema allows.

#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace m3::grammar {

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema of an object; null or {}: any parameters
};

// Values (§4.2): string -> raw text that never contains the namespace marker (exact: a ']' may be followed
// by anything but the rest of "]<]minimax[>["); with minLength > 1 or maxLength the text is a counted run of
// characters other than '<' (a repetition cannot also track the marker). pattern / format -> the regex's
// language (a pattern that itself allows the marker is not narrowed). integer / number -> JSON number text
// (integers within int64, what the parser reads), boolean -> true|false, null -> "null" (the parser reads
// it as null where the schema allows null); an optional property whose schema is only null is left out.
// enum / const -> strings raw, other values as json.dumps text. object -> `NS<key>value NS</key>` elements
// in schema order (required ones present, optional ones skippable), array -> `NS<item>value NS</item>`
// elements within minItems/maxItems (prefixItems is refused: the parser reads every item with `items`),
// a value of any type (schema true / {}) -> raw text. additionalProperties defaults to false (strict, as
// xgrammar for tool calls); where allowed, extra elements follow the listed ones with keys of 1-64
// printable ASCII characters other than < > / that are not a listed name, "invoke" or "tool_call"; their
// close tag is not tied to the open tag (no context-free grammar can copy a string).
//
// Alternatives (anyOf, type lists): the parser tries them in schema order and takes the first that reads the
// text, so the grammar keeps only what reads back as a value the schema allows: after a string alternative,
// later scalar alternatives are dropped (the string reads their text); a string after a bounded
// integer/number may not start with a digit, sign, '.' or whitespace, and after an object/array alternative
// not with '[', '{' or whitespace, nor be empty (a pattern/format string is dropped there); only the first
// object/array alternative is kept, none when the first alternative is a string and null is not allowed
// (the parser then reads the value as raw text), and none that may be empty after a constrained string.
//
// The whole block: "]<]minimax[>[<tool_call>\n", then one invoke per call (one or more when `parallel`,
// else exactly one), each "]<]minimax[>[<invoke name=\"NAME\">" + parameters + "]<]minimax[>[</invoke>\n",
// then "]<]minimax[>[</tool_call>". `only` non-empty: every invoke names that tool. `content_first` (auto
// tool choice with strict tools): text without the marker first, then the block or nothing. Throws
// kInvalidArgument
// ("tools[2].parameters: unsupported keyword 'X' at /properties/foo") for schemas it cannot honour, for a
// tool name the markup cannot carry, and when `only` is not among the tools.
Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, std::string_view only = {},
                          bool parallel = true, bool content_first = false);

}  // namespace m3::grammar
