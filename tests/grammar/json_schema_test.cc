// JSON Schema -> grammar: for each feature, documents the grammar must accept and documents it must reject
// (checked with the Earley matcher), every refusal's message, and Claude Code's real tool schemas.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace m3::grammar {
namespace {

using nlohmann::ordered_json;

Grammar compile(const std::string& schema, JsonGrammarOptions o = {}) {
  return json_schema_grammar(ordered_json::parse(schema), o);
}

// Every document in `good` is accepted and every one in `bad` rejected.
void expect_language(const Grammar& g, const std::vector<std::string>& good,
                     const std::vector<std::string>& bad) {
  for (const std::string& s : good) EXPECT_TRUE(matches(g, s)) << "should accept: " << s;
  for (const std::string& s : bad) EXPECT_FALSE(matches(g, s)) << "should reject: " << s;
}

// The message of the kInvalidArgument error compiling `schema` throws ("" when it compiles).
std::string error_of(const std::string& schema, JsonGrammarOptions o = {}) {
  try {
    compile(schema, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "";
}

ordered_json claude_code_tools() {
  std::ifstream in("tests/fixtures/claude_code/session.json");
  EXPECT_TRUE(in.good());
  return ordered_json::parse(
      std::string(std::istreambuf_iterator<char>(in), {}))["requests"][0]["body"]["tools"];
}

ordered_json tool_schema(const std::string& name) {
  for (const auto& t : claude_code_tools())
    if (t["name"] == name) return t["input_schema"];
  ADD_FAILURE() << "no tool " << name;
  return {};
}

TEST(JsonSchemaTypes, Scalars) {
  expect_language(compile(R"({"type": "boolean"})"), {"true", "false"}, {"True", "1", "null", " true"});
  expect_language(compile(R"({"type": "null"})"), {"null"}, {"nul", "None", "\"null\""});
  expect_language(compile(R"({"type": ["integer", "null"]})"), {"5", "-12", "null"},
                  {"5.0", "\"5\"", "true"});
}

TEST(JsonSchemaStrings, SyntaxAndEscapes) {
  const Grammar g = compile(R"({"type": "string"})");
  expect_language(g,
                  {R"("")", R"("plain")", R"("tab\tquote\"slash\/back\\")", R"("\u00e9\uD83D\uDE00")",
                   "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", R"("\b\f\n\r")"},
                  {"plain", R"("unterminated)", "\"raw\nnewline\"", R"("bad \x escape")", R"("\u12G4")",
                   "\"\xC3\"", "\"\xED\xA0\x80\"", R"("a" "b")", "\"\x01\""});
}

TEST(JsonSchemaStrings, LengthCountsCharacters) {
  const Grammar g = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  // An escape sequence and a multi-byte character are one character each.
  expect_language(g, {R"("ab")", R"("abc")", R"("\n\t")", R"("\u0041bc")", "\"\xC3\xA9\xC3\xA9\xC3\xA9\""},
                  {R"("a")", R"("abcd")", R"("\n\n\n\n")", "\"\xC3\xA9\""});
  expect_language(compile(R"({"type": "string", "maxLength": 0})"), {R"("")"}, {R"("a")"});
}

TEST(JsonSchemaNumbers, SyntaxAndDigitBounds) {
  const Grammar g = compile(R"({"type": "number"})");
  expect_language(g,
                  {"0", "-0", "1.5", "-0.25", "1e5", "1E+5", "2.5e-10", "12345678901234567890",
                   "1.12345678901234567890", "1e99"},
                  {"01", "1.", ".5", "+1", "1e", "1e100", "123456789012345678901", "1.123456789012345678901",
                   "NaN", "Infinity", "- 1", "0x10"});
  expect_language(compile(R"({"type": "integer"})"), {"0", "-7", "99999999999999999999"},
                  {"1.0", "1e3", "-0", "007", "100000000000000000000"});
}

TEST(JsonSchemaNumbers, NonNegativeAndPositive) {
  expect_language(compile(R"({"type": "number", "minimum": 0})"), {"0", "0.0", "3.5", "1e-5"},
                  {"-1", "-0.5", "-0"});
  const Grammar positive = compile(R"({"type": "number", "exclusiveMinimum": 0})");
  expect_language(positive, {"1", "0.001", "0.10", "2.5e-3", "0.00000000000000000001"},
                  {"0", "0.0", "0.000", "0e5", "-1", "-0.5"});
  expect_language(compile(R"({"type": "number", "minimum": 0, "exclusiveMinimum": true})"), {"0.5"}, {"0"});
}

// For each range: min-1 rejected, min and max accepted, max+1 rejected, plus a value inside.
TEST(JsonSchemaIntegers, RangesAreExact) {
  struct Case {
    std::string bounds, below, lo, inside, hi, above;
  };
  const std::vector<Case> cases = {
      {R"("minimum": 0, "maximum": 100)", "-1", "0", "57", "100", "101"},
      {R"("minimum": 1, "maximum": 12)", "0", "1", "9", "12", "13"},
      {R"("minimum": -273, "maximum": -40)", "-274", "-273", "-100", "-40", "-39"},
      {R"("minimum": -15, "maximum": 15)", "-16", "-15", "0", "15", "16"},
      {R"("minimum": 17, "maximum": 2048)", "16", "17", "999", "2048", "2049"},
      {R"("minimum": 0, "maximum": 9007199254740991)", "-1", "0", "4503599627370496", "9007199254740991",
       "9007199254740992"},
      {R"("minimum": -9007199254740991, "maximum": 9007199254740991)", "-9007199254740992",
       "-9007199254740991", "-1", "9007199254740991", "9007199254740992"},
      {R"("exclusiveMinimum": 0, "maximum": 9007199254740991)", "0", "1", "10", "9007199254740991",
       "9007199254740992"},
      {R"("exclusiveMinimum": -5.5, "exclusiveMaximum": 7.5)", "-6", "-5", "0", "7", "8"},
      {R"("minimum": 0.5, "maximum": 10.9)", "0", "1", "5", "10", "11"},
      {R"("minimum": 5, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true)", "5", "6", "8",
       "9", "10"},
      {R"("minimum": 0, "maximum": 18446744073709551615)", "-1", "0", "9223372036854775808",
       "18446744073709551615", "18446744073709551616"},
      {R"("minimum": -9223372036854775808, "maximum": 9223372036854775807)", "-9223372036854775809",
       "-9223372036854775808", "123", "9223372036854775807", "9223372036854775808"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bounds);
    const Grammar g = compile(R"({"type": "integer", )" + c.bounds + "}");
    expect_language(g, {c.lo, c.inside, c.hi}, {c.below, c.above, c.lo + ".0", "0" + c.hi});
  }
  const Grammar one_sided = compile(R"({"type": "integer", "minimum": 10})");
  expect_language(one_sided, {"10", "11", "99999999999999999999"},
                  {"9", "0", "-10", "100000000000000000000"});
  expect_language(compile(R"({"type": "integer", "maximum": -3})"), {"-3", "-1000"}, {"-2", "0", "3"});
  expect_language(compile(R"({"type": "integer", "minimum": 7, "maximum": 7})"), {"7"}, {"6", "8", "77"});
}

TEST(JsonSchemaEnum, ValuesAsCompactJson) {
  const Grammar g = compile(R"({"enum": ["red", "say \"hi\"", 3, 2.5, true, null, {"a": [1, "x"]}, "é"]})");
  expect_language(
      g, {R"("red")", R"("say \"hi\"")", "3", "2.5", "true", "null", R"({"a":[1,"x"]})", "\"\xC3\xA9\""},
      {"red", R"("blue")", "3.0", "false", R"({"a": [1, "x"]})", R"("\u00e9")"});
  // json.dumps separators in the compact style.
  JsonGrammarOptions compact;
  compact.any_whitespace = false;
  expect_language(compile(R"({"const": {"a": [1, 2]}})", compact), {R"({"a": [1, 2]})"}, {R"({"a":[1,2]})"});
  // `type` filters the values.
  expect_language(compile(R"({"type": "string", "enum": ["a", 1, "b"]})"), {R"("a")", R"("b")"}, {"1"});
  expect_language(compile(R"({"type": "integer", "enum": [1, 2.0, 2.5]})"), {"1", "2.0"}, {"2.5"});
  expect_language(compile(R"({"const": "only"})"), {R"("only")"}, {R"("other")"});
}

TEST(JsonSchemaObjects, PropertyOrderRequiredAndOptional) {
  const Grammar g = compile(R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name"], "additionalProperties": false})");
  expect_language(
      g,
      {R"({"name":"a"})", R"({"name":"a","age":3})", R"({"name":"a","tags":["x"]})",
       R"({"name":"a","age":3,"tags":[]})", R"({ "name" : "a" , "age" : 3 })",
       "{\n  \"name\": \"a\",\n  \"age\": 3\n}"},
      {"{}", R"({"age":3})", R"({"age":3,"name":"a"})", R"({"name":"a","extra":1})", R"({"name":"a",})",
       R"({"name":"a","age":"3"})", R"({"name":"a","name":"b"})", R"({"name":"a","age":3,"age":4})"});
  // All optional: the empty object and any ordered subset.
  expect_language(
      compile(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "additionalProperties": false})"),
      {"{}", "{ }", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"}, {R"({"b":2,"a":1})", "{,}"});
}

TEST(JsonSchemaObjects, AdditionalProperties) {
  const std::string props = R"("properties": {"id": {"type": "integer"}}, "required": ["id"])";
  // Default (JSON Schema): any extra key with any value, after the listed ones.
  const Grammar open = compile("{\"type\": \"object\", " + props + "}");
  expect_language(open, {R"({"id":1})", R"({"id":1,"x":[1,{"y":null}],"z":"w"})"}, {R"({"x":1,"id":1})"});
  // Strict (OpenAI): no extras unless asked for.
  JsonGrammarOptions strict;
  strict.strict = true;
  expect_language(compile("{\"type\": \"object\", " + props + "}", strict), {R"({"id":1})"},
                  {R"({"id":1,"x":1})"});
  const Grammar typed =
      compile("{\"type\": \"object\", " + props + R"(, "additionalProperties": {"type": "string"}})", strict);
  expect_language(typed, {R"({"id":1,"k":"v","k2":"v2"})"}, {R"({"id":1,"k":2})"});
  // A required key missing from `properties` takes the additionalProperties schema, after the listed ones.
  expect_language(compile(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"],
      "additionalProperties": {"type": "boolean"}})"),
                  {R"({"b":true})", R"({"a":1,"b":false})"}, {R"({"a":1})", R"({"b":1})"});
}

TEST(JsonSchemaObjects, ImpliedPropertyCounts) {
  const Grammar g =
      compile(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["a"], "minProperties": 1, "maxProperties": 2, "additionalProperties": false})");
  expect_language(g, {R"({"a":1})", R"({"a":1,"b":2})"}, {"{}"});
}

TEST(JsonSchemaObjects, TypeFromKeywordsAndFalseProperties) {
  const Grammar g = compile(R"({"properties": {"a": {"minLength": 2}, "b": {"minimum": 0}, "c": false},
      "additionalProperties": false})");
  expect_language(g, {"{}", R"({"a":"xy","b":0.5})", R"({"b":0})"},
                  {R"({"a":"x"})", R"({"b":-1})", R"({"c":1})", "[]", R"("xy")"});
}

TEST(JsonSchemaObjects, CombinedSchemasAndAdditionalProperties) {
  // Merged allOf / $ref properties come after the outer ones.
  const Grammar g = compile(R"({"$defs": {"base": {"type": "object", "properties": {"x": {"type": "integer"}},
      "required": ["x"]}}, "allOf": [{"$ref": "#/$defs/base"}], "properties": {"y": {"type": "boolean"}}})");
  expect_language(g, {R"({"x":1})", R"({"y":true,"x":1})"}, {R"({"y":true})", R"({"x":"1"})"});
  // additionalProperties sees only its own schema's properties (JSON Schema): merged, the other side's
  // would pass as listed ones, so the combination is refused rather than enforced wrongly.
  EXPECT_NE(error_of(R"({"$defs": {"base": {"properties": {"x": {"type": "integer"}}}}, "allOf": [{"$ref":
      "#/$defs/base"}], "properties": {"y": {"type": "boolean"}}, "additionalProperties": false})")
                .find("combined schema"),
            std::string::npos);
  expect_language(compile(R"({"enum": [1, 2, 3], "const": 2})"), {"2"}, {"1", "3"});
}

TEST(JsonSchemaArrays, ItemsAndCounts) {
  const Grammar g =
      compile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  expect_language(g, {"[1]", "[1,2]", "[ 1 , 2 , 3 ]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"1\"]", "[,1]"});
  expect_language(compile(R"({"type": "array"})"), {"[]", R"([1,"a",null,[{}]])"}, {"[", "{}"});
  expect_language(compile(R"({"type": "array", "items": false})"), {"[]"}, {"[1]"});
}

TEST(JsonSchemaArrays, PrefixItems) {
  const Grammar closed =
      compile(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
      "items": false, "minItems": 1})");
  expect_language(closed, {"[1]", R"([1,"a"])"}, {"[]", R"(["a"])", R"([1,"a",2])", R"([1,2])"});
  const Grammar open =
      compile(R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"},
      "maxItems": 3})");
  expect_language(open, {"[]", "[true]", "[true,null,null]"},
                  {"[null]", "[true,null,null,null]", "[true,true]"});
}

TEST(JsonSchemaWhitespace, AnyAndCompact) {
  JsonGrammarOptions limited;
  limited.max_whitespace = 4;
  const std::string schema =
      R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
      "b": {"type": "boolean"}}, "additionalProperties": false})";
  const Grammar g = compile(schema, limited);
  expect_language(g, {R"({"a":[1,2],"b":true})", "{\t\"a\" :\r\n[ 1 ,2 ] , \"b\":true }", "{    \"b\":true}"},
                  {"{     \"b\":true}", " {\"b\":true}", "{\"b\":true} "});
  JsonGrammarOptions compact;
  compact.any_whitespace = false;
  expect_language(compile(schema, compact), {R"({"a": [1, 2], "b": true})", "{}", R"({"b": true})"},
                  {R"({"a":[1,2],"b":true})", R"({"a": [1,2], "b": true})", R"({ "b": true})"});
}

TEST(JsonSchemaCombinators, AnyOfOneOfAllOf) {
  expect_language(compile(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})"),
                  {"1", R"("a")"}, {R"("ab")", "true"});
  expect_language(compile(R"({"oneOf": [{"const": 1}, {"const": "x"}]})"), {"1", R"("x")"}, {"2"});
  expect_language(compile(R"({"allOf": [{"type": "integer", "minimum": 3}], "description": "d"})"), {"3"},
                  {"2"});
  // Siblings of anyOf apply to every branch.
  expect_language(compile(R"({"type": "object", "properties": {"k": {"type": "integer"}},
      "anyOf": [{"required": ["k"]}, {"properties": {"j": {"type": "boolean"}}}]})"),
                  {R"({"k":1})", "{}", R"({"k":1,"j":true})"}, {R"({"j":1})", R"({"k":"1"})"});
  expect_language(compile(R"({"anyOf": [false, {"type": "null"}]})"), {"null"}, {"1"});
}

TEST(JsonSchemaRefs, RecursiveTree) {
  const Grammar g = compile(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"], "additionalProperties": false}}})");
  expect_language(
      g,
      {R"({"value":1})", R"({"value":1,"children":[]})",
       R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4,"children":[]}]}]})"},
      {R"({"value":1,"children":[{}]})", R"({"value":1,"children":[{"value":"x"}]})", R"({"children":[]})"});
  // "#" refers to the whole schema; "definitions" is the older spelling.
  expect_language(
      compile(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
      "required": ["next"], "additionalProperties": false})"),
      {R"({"next":null})", R"({"next":{"next":{"next":null}}})"}, {R"({"next":{}})", "{}"});
  expect_language(compile(R"({"definitions": {"id": {"type": "string", "format": "uuid"}}, "type": "array",
      "items": {"$ref": "#/definitions/id"}})"),
                  {R"(["123e4567-e89b-12d3-a456-426614174000"])"}, {R"(["123"])"});
  // A $ref with validating siblings: both hold.
  expect_language(compile(R"({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "minimum": 2})"),
                  {"2"}, {"1"});
}

TEST(JsonSchemaStrings, PatternAndFormats) {
  expect_language(compile(R"({"type": "string", "pattern": "^wf_[a-z0-9-]{6,}$"})"), {R"("wf_abc-123")"},
                  {R"("wf_abc")", R"("xwf_abcdefg")", R"("wf_ABCDEFG")"});
  expect_language(compile(R"({"type": "string", "pattern": "a\"b\\\\c"})"), {R"("a\"b\\c")"}, {R"("a"b\c")"});
  struct Case {
    std::string format;
    std::vector<std::string> good, bad;
  };
  const std::vector<Case> cases = {
      {"date-time",
       {"2024-02-29T13:45:00Z", "2024-01-01t00:00:00.123+05:30"},
       {"2024-01-01", "2024-13-01T00:00:00Z"}},
      {"date", {"2024-12-31"}, {"2024-12-32", "24-12-31"}},
      {"time", {"23:59:60Z", "08:30:00-07:00"}, {"24:00:00Z", "08:30:00"}},
      {"email", {"a.b+c@example.com", "root@localhost"}, {"a@", "@b.com", "a b@c.com"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
      {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4"}},
      {"ipv6",
       {"::", "::1", "fe80::1ff:fe23:4567:890a", "2001:db8:0:0:0:0:2:1", "::ffff:192.0.2.128"},
       {"2001:db8::1::2", "1:2:3:4:5:6:7:8:9", "12345::"}},
      {"hostname", {"example.com", "a-b.c"}, {"-a.com", "a..b", "a_b.com"}},
      {"uri", {"https://example.com/a?b=c#d", "urn:isbn:0451450523"}, {"no scheme", "://x", "http://a b"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.format);
    std::vector<std::string> good, bad;
    for (const auto& s : c.good) good.push_back("\"" + s + "\"");
    for (const auto& s : c.bad) bad.push_back("\"" + s + "\"");
    expect_language(compile(R"({"type": "string", "format": ")" + c.format + "\"}"), good, bad);
  }
}

TEST(JsonSchemaAny, ObjectAtTheTop) {
  const Grammar g = any_json_grammar();
  expect_language(g, {"{}", R"({"a":[1,2.5,{"b":null}],"c":"d","e":true})", R"({ "x" : { } })"},
                  {"[]", "1", R"("s")", "null", R"({"a":})", R"({"a":1,})", "{'a':1}"});
  expect_language(compile("true"), {"1", "[]", R"({"a":"b"})", "null"}, {"", "nope"});
  expect_language(compile("{}"), {R"("x")"}, {"x"});
}

TEST(JsonSchemaAnnotations, AreIgnored) {
  expect_language(
      compile(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "t",
      "description": "d", "default": 1, "examples": [1], "$comment": "c", "deprecated": false, "readOnly": true,
      "writeOnly": false, "type": "integer", "contentMediaType": "text/plain", "contentEncoding": "base64"})"),
      {"1"}, {R"("1")"});
}

TEST(JsonSchemaErrors, MessagesNameTheKeywordAndPointer) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "object", "properties": {"foo": {"type": "string", "uniqueItems": true}}})",
       "json_schema: unsupported keyword 'uniqueItems' at /properties/foo"},
      {R"({"not": {}})", "json_schema: unsupported keyword 'not' at the schema root"},
      {R"({"type": "array", "items": {"multipleOf": 2}})", "unsupported keyword 'multipleOf' at /items"},
      {R"({"type": "object", "properties": {"a/b": {"if": {}}}})",
       "unsupported keyword 'if' at /properties/a~1b"},
      {R"({"type": "string", "format": "credit-card"})",
       "unsupported format \"credit-card\" at the schema root"},
      {R"({"allOf": [{"type": "integer"}, {"minimum": 1}]})", "allOf is supported with exactly one schema"},
      {R"({"$ref": "https://example.com/s.json"})", "unsupported $ref 'https://example.com/s.json'"},
      {R"({"$ref": "#/$defs/missing"})", "$ref '#/$defs/missing' does not resolve"},
      {R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})", "$ref cycle"},
      {R"({"enum": []})", "enum must be a non-empty array"},
      {R"({"type": "integer", "enum": ["a"]})", "the schema matches nothing at the schema root"},
      {"false", "the schema matches nothing"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems > maxItems matches nothing"},
      {R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})",
       "minItems above the number"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})", "minLength > maxLength matches nothing"},
      {R"({"type": "string", "pattern": "a+", "maxLength": 4})", "minLength/maxLength together with pattern"},
      {R"({"type": "string", "pattern": "a", "format": "email"})", "pattern together with format"},
      {R"({"type": "number", "minimum": 1})", "number bounds other than minimum 0 / exclusiveMinimum 0"},
      {R"({"type": "number", "maximum": 10})", "('maximum')"},
      {R"({"type": "integer", "minimum": 10, "maximum": 9})", "integer bounds leave no value"},
      {R"({"type": "integer", "minimum": 1e30})", "integer bounds leave no value"},
      {R"({"type": "integer", "minimum": "1"})", "'minimum' must be a number"},
      {R"({"type": "strin"})", "unknown type \"strin\""},
      {R"({"type": []})", "'type' must not be an empty list"},
      {R"({"anyOf": [{}], "oneOf": [{}]})", "anyOf together with oneOf"},
      {R"({"anyOf": []})", "anyOf must be a non-empty array"},
      {R"({"type": "array", "items": [{"type": "integer"}]})",
       "'items' as an array (a tuple) is not supported"},
      {R"({"type": "object", "required": ["x"], "additionalProperties": false})",
       "required property 'x' is not allowed by additionalProperties"},
      {R"({"type": "object", "minProperties": 1})", "minProperties above the number of required properties"},
      {R"({"type": "object", "maxProperties": 1})", "maxProperties below the number of possible properties"},
      {R"({"type": "object", "properties": []})", "'properties' must be an object"},
      {R"({"type": "object", "required": [1]})", "'required' must be an array of strings"},
      {R"({"type": "string", "maxLength": -1})", "'maxLength' must be a non-negative integer"},
      {R"({"type": "object", "properties": {"p": {"type": "string", "pattern": "(a"}}})",
       "json_schema: pattern: "},
      {"[1]", "a schema must be an object or a boolean"},
      {R"({"allOf": [{"type": "integer"}], "type": "string"})", "conflicting 'type' in combined schemas"},
      {R"({"allOf": [{"properties": {"a": {"type": "string"}}}], "properties": {"a": {"type": "integer"}}})",
       "conflicting schemas for property 'a'"},
      {R"({"allOf": [true], "type": "string"})", "cannot combine a boolean schema with its siblings"},
      {R"({"$ref": 1})", "$ref must be a string"},
      {R"({"type": "array", "prefixItems": {}})", "'prefixItems' must be an array of schemas"},
      {R"({"type": "array", "minItems": 3000000000})", "minItems is too large"},
      {R"({"type": "string", "minLength": 3000000000})", "minLength is too large"},
      {R"({"type": "string", "pattern": 1})", "'pattern' must be a string"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "allOf": [{"$ref": "#/$defs/a"}],
          "type": "object"})",
       "$ref chain deeper than 64"},
  };
  for (const auto& [schema, message] : cases) {
    SCOPED_TRACE(schema);
    const std::string got = error_of(schema);
    EXPECT_FALSE(got.empty()) << "compiled";
    EXPECT_NE(got.find(message), std::string::npos) << got;
  }
  std::string deep = "{\"type\": \"integer\"}";
  for (int i = 0; i < 100; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(error_of(deep).find("schema nesting deeper than 64"), std::string::npos);
  std::string nested = "{}";
  for (int i = 0; i < 100; ++i) nested = R"({"anyOf": [)" + nested + "]}";
  EXPECT_NE(error_of(nested).find("schema combinators or $refs nested deeper than 64"), std::string::npos);
}

TEST(JsonSchemaClaudeCode, EveryToolSchemaCompiles) {
  const ordered_json tools = claude_code_tools();
  ASSERT_EQ(tools.size(), 12u);
  for (const auto& tool : tools) {
    SCOPED_TRACE(tool["name"].get<std::string>());
    for (bool any_ws : {true, false}) {
      JsonGrammarOptions o;
      o.any_whitespace = any_ws;
      EXPECT_NO_THROW(json_schema_grammar(tool["input_schema"], o));
    }
  }
}

TEST(JsonSchemaClaudeCode, BashEditReadCalls) {
  const Grammar bash = json_schema_grammar(tool_schema("Bash"));
  expect_language(
      bash,
      {R"({"command":"ls -la"})",
       R"({"command":"git status","timeout":120000,"description":"Show working tree status"})",
       R"({"command":"sleep 1","timeout":1.5e3,"run_in_background":true,"dangerouslyDisableSandbox":false})"},
      {R"({"timeout":5})", R"({"command":42})", R"({"command":"ls","verbose":true})",
       R"({"description":"d","command":"ls"})", R"({"command":"ls","run_in_background":"yes"})"});
  const Grammar edit = json_schema_grammar(tool_schema("Edit"));
  expect_language(edit,
                  {R"({"file_path":"/a.cc","old_string":"x = 1;\n","new_string":"x = 2;\n"})",
                   R"({"file_path":"/a.cc","old_string":"a","new_string":"b","replace_all":true})"},
                  {R"({"file_path":"/a.cc","old_string":"a"})",
                   R"({"file_path":"/a.cc","old_string":"a","new_string":1})"});
  const Grammar read = json_schema_grammar(tool_schema("Read"));
  expect_language(
      read,
      {R"({"file_path":"/etc/hosts"})", R"({"file_path":"/f","offset":0,"limit":9007199254740991})",
       R"({"file_path":"/f","pages":"1-5","allow_large":false})"},
      {R"({"offset":1})", R"({"file_path":"/f","offset":-1})", R"({"file_path":"/f","limit":0})",
       R"({"file_path":"/f","limit":9007199254740992})", R"({"file_path":"/f","offset":1.5})"});
  const Grammar list = json_schema_grammar(tool_schema("ListAgents"));
  const std::string max_cursor(256, 'c');
  expect_language(list, {"{}", R"({"cursor":")" + max_cursor + "\"}"},
                  {R"({"cursor":")" + max_cursor + "c\"}"});
  const Grammar findings = json_schema_grammar(tool_schema("ReportFindings"));
  expect_language(
      findings,
      {R"({"findings":[]})",
       R"({"level":"high","findings":[{"file":"a.cc","line":-3,"summary":"s","failure_scenario":"f"}]})"},
      {R"({"findings":[{"file":"a.cc","summary":"s"}]})", R"({"level":"extreme","findings":[]})",
       R"({"findings":[{"file":"a","summary":"s","failure_scenario":"f","short_summary":")" +
           std::string(61, 'x') + "\"}]}"});
}

}  // namespace
}  // namespace m3::grammar
