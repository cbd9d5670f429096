// Schema-typed parameter values (serving-api.md §4.2): integers, floats, booleans, null, arrays, objects,
// strings that look like numbers, anyOf / type lists / enum / $ref, unknown parameters, and the exact JSON
// text produced.
#include "parser_test_util.h"

namespace m3::test {
namespace {

const std::string NS(kMinimaxNamespace);

std::string el(const std::string& name, const std::string& body) {
  return NS + "<" + name + ">" + body + NS + "</" + name + ">";
}
std::string items(std::initializer_list<std::string> values) {
  std::string s;
  for (const auto& v : values) s += el("item", v);
  return s;
}

// Arguments JSON text of one call of tool "f" whose parameters schema is `params`.
std::string args_with(const nlohmann::json& params, const std::string& body) {
  nlohmann::json tools = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", params}}}}};
  auto r = ToolCallParser(tools, counter_ids())
               .parse(NS + "<tool_call>\n" + NS + "<invoke name=\"f\">" + body + NS + "</invoke>\n" + NS +
                      "</tool_call>");
  EXPECT_EQ(r.tool_calls.size(), 1u);
  if (r.tool_calls.empty()) return "";
  EXPECT_FALSE(nlohmann::json::parse(r.tool_calls[0].arguments_json, nullptr, false).is_discarded())
      << r.tool_calls[0].arguments_json;
  return r.tool_calls[0].arguments_json;
}

// Arguments of a single parameter `v` whose schema is `schema`.
std::string one(const char* schema, const std::string& body) {
  nlohmann::json params = {{"type", "object"}, {"properties", {{"v", nlohmann::json::parse(schema)}}}};
  return args_with(params, el("v", body));
}

TEST(chat_parsers_Schema, Integers) {
  const char* s = R"({"type": "integer"})";
  EXPECT_EQ(one(s, "42"), R"({"v": 42})");
  EXPECT_EQ(one(s, "-7"), R"({"v": -7})");
  EXPECT_EQ(one(s, "+5"), R"({"v": 5})");
  EXPECT_EQ(one(s, "018956"), R"({"v": 18956})");  // the spec's zip-code example
  EXPECT_EQ(one(s, " 12\n"), R"({"v": 12})");
  EXPECT_EQ(one(s, "9223372036854775807"), R"({"v": 9223372036854775807})");
  // Not an integer: the raw text is kept rather than a value invented.
  EXPECT_EQ(one(s, "9223372036854775808"), R"({"v": "9223372036854775808"})");
  EXPECT_EQ(one(s, "1.5"), R"({"v": "1.5"})");
  EXPECT_EQ(one(s, "1e3"), R"({"v": "1e3"})");
  EXPECT_EQ(one(s, "twelve"), R"({"v": "twelve"})");
  EXPECT_EQ(one(s, ""), R"({"v": ""})");
  EXPECT_EQ(one(s, "-"), R"({"v": "-"})");
}

TEST(chat_parsers_Schema, Numbers) {
  const char* s = R"({"type": "number"})";
  EXPECT_EQ(one(s, "3.14"), R"({"v": 3.14})");
  EXPECT_EQ(one(s, "42"), R"({"v": 42})");
  EXPECT_EQ(one(s, "-0.5"), R"({"v": -0.5})");
  EXPECT_EQ(one(s, "1e-05"), R"({"v": 1e-05})");
  EXPECT_EQ(one(s, ".5"), R"({"v": 0.5})");
  EXPECT_EQ(one(s, "2."), R"({"v": 2.0})");
  EXPECT_EQ(one(s, "+2.5E2"), R"({"v": 250.0})");
  for (const char* bad : {"NaN", "inf", "-Infinity", "0x10", "1e999", "1.2.3", "e5", "1e", "."}) {
    EXPECT_EQ(one(s, bad), std::string(R"({"v": ")") + bad + "\"}") << bad;
  }
}

TEST(chat_parsers_Schema, Booleans) {
  const char* s = R"({"type": "boolean"})";
  for (const char* t : {"true", "True", "TRUE", "1", " true\n"}) EXPECT_EQ(one(s, t), R"({"v": true})") << t;
  for (const char* f : {"false", "False", "0"}) EXPECT_EQ(one(s, f), R"({"v": false})") << f;
  EXPECT_EQ(one(s, "yes"), R"({"v": "yes"})");
}

TEST(chat_parsers_Schema, Null) {
  EXPECT_EQ(one(R"({"type": "null"})", "null"), R"({"v": null})");
  EXPECT_EQ(one(R"({"type": "null"})", "None"), R"({"v": null})");
  // Only where the schema allows null: for a plain string it is the word "null".
  EXPECT_EQ(one(R"({"type": "string"})", "null"), R"({"v": "null"})");
  EXPECT_EQ(one(R"({"type": ["string", "null"]})", "null"), R"({"v": null})");
  EXPECT_EQ(one(R"({"type": ["string", "null"]})", "nullable"), R"({"v": "nullable"})");
  EXPECT_EQ(one(R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})", "NULL"), R"({"v": null})");
  EXPECT_EQ(one(R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})", "3"), R"({"v": 3})");
}

TEST(chat_parsers_Schema, StringsThatLookLikeOtherTypes) {
  const char* s = R"({"type": "string"})";
  EXPECT_EQ(one(s, "018956"), R"({"v": "018956"})");
  EXPECT_EQ(one(s, "true"), R"({"v": "true"})");
  EXPECT_EQ(one(s, "[1, 2]"), R"({"v": "[1, 2]"})");
  EXPECT_EQ(one(s, "{\"a\": 1}"), R"({"v": "{\"a\": 1}"})");
  EXPECT_EQ(one(s, "  spaced\n"), R"({"v": "  spaced\n"})");  // strings are verbatim, whitespace included
  EXPECT_EQ(one(s, "a <b>&amp;</b>"),
            R"({"v": "a <b>&amp;</b>"})");  // no XML unescaping: the template writes raw
}

TEST(chat_parsers_Schema, Arrays) {
  EXPECT_EQ(one(R"({"type": "array", "items": {"type": "integer"}})", items({"1", "-2", "30"})),
            R"({"v": [1, -2, 30]})");
  EXPECT_EQ(one(R"({"type": "array", "items": {"type": "string"}})", items({"1", "x"})),
            R"({"v": ["1", "x"]})");
  EXPECT_EQ(one(R"({"type": "array"})", items({"1", "x"})), R"({"v": ["1", "x"]})");
  EXPECT_EQ(one(R"({"type": "array", "items": {"type": "number"}})", "[1.0, 2.50, 3]"),
            R"({"v": [1.0, 2.5, 3]})");
  EXPECT_EQ(one(R"({"type": "array"})", ""), R"({"v": []})");
  EXPECT_EQ(one(R"({"type": "array"})", "  \n"), R"({"v": []})");
  EXPECT_EQ(one(R"({"type": "array"})", "[1, 2"), R"({"v": "[1, 2"})");            // not JSON: kept as text
  EXPECT_EQ(one(R"({"type": "array"})", "{\"a\": 1}"), R"({"v": "{\"a\": 1}"})");  // JSON, but not an array
  // With an array schema, child tags are items whatever their name.
  EXPECT_EQ(one(R"({"type": "array", "items": {"type": "integer"}})", el("n", "1") + el("m", "2")),
            R"({"v": [1, 2]})");
  EXPECT_EQ(one(R"({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}})",
                el("item", items({"1", "2"})) + el("item", "")),
            R"({"v": [[1, 2], []]})");
  // JSON text keeps key order and big integers.
  EXPECT_EQ(one(R"({"type": "array"})", R"([{"z": 1, "a": 18446744073709551615}, "é\n", null, true])"),
            R"({"v": [{"z": 1, "a": 18446744073709551615}, "é\n", null, true]})");
}

TEST(chat_parsers_Schema, Objects) {
  const char* s = R"({"type": "object", "properties": {"n": {"type": "integer"}, "b": {"type": "boolean"},
                      "s": {"type": "string"}, "inner": {"type": "object", "properties": {"f": {"type": "number"}}}}})";
  EXPECT_EQ(one(s, el("s", "007") + el("n", "7") + el("inner", el("f", "0.25")) + el("b", "false") +
                       el("other", "9")),
            R"({"v": {"s": "007", "n": 7, "inner": {"f": 0.25}, "b": false, "other": "9"}})");
  EXPECT_EQ(one(s, R"( {"n": 1, "s": "x"} )"), R"({"v": {"n": 1, "s": "x"}})");
  EXPECT_EQ(one(s, ""), R"({"v": {}})");
  // Repeated siblings collect into a list; text next to child tags is kept under "$text".
  EXPECT_EQ(one(s, el("n", "1") + el("n", "2") + " note " + el("b", "1")),
            R"({"v": {"n": [1, 2], "b": true, "$text": " note "}})");
  EXPECT_EQ(one(R"({"type": "object"})", el("$text", "a") + "loose"),
            R"({"v": {"$text": "a", "$$text": "loose"}})");
  EXPECT_EQ(
      one(R"({"type": "object", "additionalProperties": {"type": "integer"}})", el("a", "1") + el("b", "x")),
      R"({"v": {"a": 1, "b": "x"}})");
}

TEST(chat_parsers_Schema, TypeListsAnyOfOneOfAllOf) {
  EXPECT_EQ(one(R"({"type": ["integer", "string"]})", "5"), R"({"v": 5})");
  EXPECT_EQ(one(R"({"type": ["integer", "string"]})", "five"), R"({"v": "five"})");
  EXPECT_EQ(one(R"({"type": ["string", "integer"]})", "5"), R"({"v": "5"})");  // in order: string wins
  EXPECT_EQ(one(R"({"type": ["number", "boolean"]})", "true"), R"({"v": true})");
  EXPECT_EQ(one(R"({"anyOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "integer"}}]})",
                items({"4"})),
            R"({"v": [4]})");
  EXPECT_EQ(one(R"({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                             {"type": "object", "properties": {"b": {"type": "boolean"}}}]})",
                el("a", "1") + el("b", "0")),
            R"({"v": {"a": 1, "b": false}})");
  EXPECT_EQ(one(R"({"allOf": [{"type": "integer"}]})", "8"), R"({"v": 8})");
  EXPECT_EQ(one(R"({"type": "mystery"})", "8"), R"({"v": "8"})");
}

TEST(chat_parsers_Schema, EnumAndConst) {
  EXPECT_EQ(one(R"({"enum": ["c", "f"]})", "c"), R"({"v": "c"})");
  EXPECT_EQ(one(R"({"enum": [1, 2, 3]})", "2"), R"({"v": 2})");
  EXPECT_EQ(one(R"({"enum": [1, 2, 3]})", "4"), R"({"v": "4"})");
  EXPECT_EQ(one(R"({"enum": [true, null, "x"]})", "null"), R"({"v": null})");
  EXPECT_EQ(one(R"({"const": 10})", "10"), R"({"v": 10})");
  EXPECT_EQ(one(R"({"type": "integer", "enum": [1, 2]})", "2"), R"({"v": 2})");
}

TEST(chat_parsers_Schema, RefsIncludingRecursive) {
  auto params = nlohmann::json::parse(R"({"$defs": {"Node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
      "a/b": {"type": "boolean"}},
    "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}, "flag": {"$ref": "#/$defs/a~1b"},
      "loop": {"$ref": "#/properties/loop"}}})");
  std::string tree = el("value", "1") + el("children", el("item", el("value", "2")) +
                                                           el("item", el("value", "3") + el("children", "")));
  EXPECT_EQ(
      args_with(params, el("root", tree) + el("flag", "1") + el("loop", "9")),
      R"({"root": {"value": 1, "children": [{"value": 2}, {"value": 3, "children": []}]}, "flag": true, "loop": "9"})");
}

TEST(chat_parsers_Schema, UnknownParametersAndTools) {
  auto params = nlohmann::json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  // Unknown parameters stay strings (vLLM), or take the shape their tags give them.
  EXPECT_EQ(args_with(params,
                      el("n", "1") + el("x", "2") + el("y", items({"1", "true"})) + el("z", el("k", "null"))),
            R"({"n": 1, "x": "2", "y": ["1", "true"], "z": {"k": "null"}})");
  auto r = ToolCallParser(nlohmann::json::array(), counter_ids())
               .parse(NS + "<tool_call>" + NS + "<invoke name=\"g\">" + el("n", "1") + NS + "</invoke>" + NS +
                      "</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"n": "1"})");
}

TEST(chat_parsers_Schema, ScalarElementsCannotHaveChildren) {
  // The model forgot </n>: the next tag is a sibling, not a child.
  auto params = nlohmann::json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
      "s": {"type": "string"}, "o": {"type": "object", "properties": {"i": {"type": "integer"}, "j": {"type": "integer"}}}}})");
  EXPECT_EQ(args_with(params, NS + "<n>5" + el("s", "x")), R"({"n": 5, "s": "x"})");
  EXPECT_EQ(args_with(params, NS + "<s>text" + el("n", "5")), R"({"s": "text", "n": 5})");
  EXPECT_EQ(args_with(params, el("o", NS + "<i>1" + el("j", "2"))), R"({"o": {"i": 1, "j": 2}})");
  // A close tag for an enclosing element closes what is open inside it; a stray one is dropped.
  EXPECT_EQ(args_with(params, el("o", NS + "<i>1") + NS + "</zz>" + el("n", "3")),
            R"({"o": {"i": 1}, "n": 3})");
}

TEST(chat_parsers_Schema, ExactJsonFormatting) {
  auto params = nlohmann::json::parse(R"({"type": "object", "properties": {"b": {"type": "integer"},
      "a": {"type": "array", "items": {"type": "number"}}, "c": {"type": "object"}}})");
  EXPECT_EQ(
      args_with(params, el("b", "1") + el("a", items({"1.50", "2"})) + el("c", el("x", "y") + el("w", "z"))),
      R"({"b": 1, "a": [1.5, 2], "c": {"x": "y", "w": "z"}})");
}

}  // namespace
}  // namespace m3::test
