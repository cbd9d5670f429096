// JSON Schema -> grammar of JSON text (response_format json_schema / json_object), and the schema walker the
// tool-call grammar (tool_call_grammar.h) shares: ONE walk over a schema ($ref, type dispatch, enum/const,
// anyOf, property order, refusal of unsupported keywords with a 400-style message) with two value encodings,
// JSON text (here) and the MiniMax-M3 XML parameter markup (tool_call_grammar.cc).

#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace m3::grammar {

struct JsonGrammarOptions {
  // true: between tokens a run of [ \t\n\r]{0,max_whitespace}; false: the compact style of Python
  // json.dumps: ", " and ": " separators and no other space.
  bool any_whitespace = true;
  int max_whitespace = 64;
  // OpenAI strict mode (and xgrammar's default): additionalProperties defaults to false instead of true.
  bool strict = false;
};

// Schemas are nlohmann::ordered_json: the order of `properties` is the order of the generated text, so it
// must survive parsing (a plain nlohmann::json converts implicitly, with its keys sorted).
//
// What a schema may say. Supported: type (string, number, integer, boolean, null, object, array, lists),
// enum, const, properties + required (keys in schema order, optional ones may be skipped: exactly the objects
// with keys in that order, as xgrammar), additionalProperties (false / true / schema: extra keys come after
// the listed ones and are never a listed name: raw printable ASCII without escapes when names are listed;
// not beside properties merged from allOf / $ref, which it would not see), minProperties/maxProperties
// only when the rest of the schema already implies them, items (schema / true / false), prefixItems,
// minItems/maxItems, minLength/ maxLength (characters; an escape sequence is one), pattern (grammar/regex.h,
// whole-string match), format (date-time date time email uuid ipv4 ipv6 hostname uri, each a regex), anyOf,
// oneOf when no value can match two branches (then it equals anyOf; overlapping branches are refused), allOf
// with one schema, $ref to "#", "#/$defs/..", "#/definitions/.." (recursion: one rule
// per definition), integer minimum/maximum/exclusiveMinimum/exclusiveMaximum exactly (digit-range grammars),
// number bounds only as minimum 0 / exclusiveMinimum 0. Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly, contentMediaType, contentEncoding) are ignored;
// any other keyword, and a schema that matches nothing (enum [], minItems > maxItems...), throws
// kInvalidArgument: "json_schema: unsupported keyword 'X' at /properties/foo". A schema without `type` is
// taken as the types its keywords constrain (any value when none). enum/const values are checked against
// `type` only. A combined schema (allOf of one, a $ref or anyOf with validating siblings) lists the outer
// properties first.
//
// Text limits (runaway guards): integers have at most 20 digits, fractions at most 20 digits (a positive
// number below 1 may have up to 19 leading zeros before them), exponents at most 2 digits (so every number
// is a finite double, nonzero when written nonzero); pattern/format strings cannot also have a length bound.
// No whitespace before or after the top-level value.
//
// The grammar of JSON texts valid under `schema`.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& = {});
// response_format json_object: any JSON OBJECT (OpenAI requires an object at the top, not any value).
Grammar any_json_grammar(const JsonGrammarOptions& = {});
// Adds a rule for values of `schema` (resolving "$ref" against `root`) and returns its symbol.
Symbol add_json_value(Grammar& g, const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root,
                      const JsonGrammarOptions&);

// --- the shared walker: what an encoding gets from it ---
namespace schema {

using Json = nlohmann::ordered_json;
__extension__ typedef __int128 Int128;  // integer bounds past int64 (uint64 maxima, 20-digit limits)

enum class Kind { kString, kInteger, kNumber, kBoolean, kNull, kObject, kArray, kEnum, kAny };

struct StringSpec {
  int min_length = 0, max_length = -1;  // characters; max < 0: unbounded
  std::string regex;                    // `pattern`, or a format's regex (then never with a length bound)
  bool constrained() const { return min_length > 0 || max_length >= 0 || !regex.empty(); }
};
enum class NumberSign { kAny, kNonNegative, kPositive };

struct PropertySpec {
  std::string name;
  Symbol value;
  bool required = false;
  bool null_only = false;  // the schema allows only null
};
struct ObjectSpec {
  std::vector<PropertySpec> properties;  // schema order, then required names not listed in `properties`
  bool extra = false;                    // additional properties allowed (after the listed ones)
  std::vector<std::string> listed_keys;  // every name `properties` or `required` lists: no additional key
  Symbol extra_value;
  std::string pointer;
};
struct ArraySpec {
  std::vector<Symbol> prefix;  // prefixItems
  bool rest = false;           // items after the prefix allowed
  Symbol rest_value;
  int min = 0, max = -1;  // max < 0: unbounded
};

// One alternative of a value (a type of a type list, an anyOf branch...), in schema order.
struct Alternative {
  Kind kind;
  const Json* node;   // the schema object it came from (merged with its siblings where needed)
  StringSpec string;  // kString
  Symbol symbol;
};

// How values are written. Numbers, booleans and null are the same text in JSON and in the XML markup, so
// the base class builds them; the rest is the encoding's.
class ValueEncoding {
 public:
  // Integers outside [int_min, int_max] cannot be written (JSON: 20 digits; XML: int64, what the parser
  // reads). `error_prefix` starts every error message ("json_schema", "tools[2].parameters").
  ValueEncoding(Grammar& g, Int128 int_min, Int128 int_max, std::string error_prefix);
  virtual ~ValueEncoding() = default;

  Grammar& grammar() { return g_; }
  Int128 int_min() const { return int_min_; }
  Int128 int_max() const { return int_max_; }
  [[noreturn]] void fail(const std::string& message, const std::string& pointer) const;

  Symbol integer(Int128 lo, Int128 hi);  // decimal integers in [lo, hi], no leading zeros, no "-0"
  Symbol number(NumberSign sign);
  Symbol boolean();
  Symbol null();

  virtual Symbol string(const StringSpec& spec) = 0;
  virtual Sequence literal(const Json& value) = 0;  // one enum/const value
  virtual Symbol object(const ObjectSpec& spec) = 0;
  virtual Symbol array(const ArraySpec& spec) = 0;
  virtual Symbol any() = 0;  // a value of the schema `true`
  virtual Symbol join(const std::vector<Alternative>& alternatives) = 0;
  virtual bool supports_prefix_items() const { return true; }

 protected:
  Grammar& g_;

 private:
  Symbol digits(int min, int max);                                   // [0-9]{min,max}
  Symbol digit_range(const std::string& lo, const std::string& hi);  // equal lengths
  Symbol magnitude_range(const std::string& lo, const std::string& hi);
  Int128 int_min_, int_max_;
  std::string error_prefix_;
};

// Walks `schema` ($ref resolved against `root`) and returns the symbol of its values in `encoding`. `strict`:
// additionalProperties defaults to false. Throws kInvalidArgument for unsupported or unsatisfiable schemas.
Symbol walk(ValueEncoding& encoding, const Json& schema, const Json& root, bool strict);

// The parts one after another.
Sequence concat(std::initializer_list<Sequence> parts);

// `value` as JSON text: compact (",", ":") or Python json.dumps style (", ", ": "); non-ASCII kept as is.
std::string json_text(const Json& value, bool python_style);

// The regex of a supported `format`, or "" when it is not supported.
std::string format_regex(const std::string& format);

}  // namespace schema
}  // namespace m3::grammar
