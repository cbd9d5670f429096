// MiniMax-M3 tool-call grammar: the block and invoke structure, the XML value encoding per schema feature
// (accepted and rejected markup), the interplay with the repo's parser (every accepted call parses into the
// expected arguments), refusals, and Claude Code's real tool schemas.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/parsers/tool_call_parser.h"
#include "common/error.h"
#include "grammar/matcher.h"
#include "grammar/tool_call_grammar.h"

namespace m3::grammar {
namespace {

using nlohmann::ordered_json;

const std::string NS(kMinimaxNamespace);

std::string param(const std::string& key, const std::string& value) {
  return NS + "<" + key + ">" + value + NS + "</" + key + ">";
}
std::string item(const std::string& value) {
  return param("item", value);
}
std::string invoke(const std::string& name, const std::string& params) {
  return NS + "<invoke name=\"" + name + "\">" + params + NS + "</invoke>\n";
}
std::string block(const std::vector<std::string>& invokes) {
  std::string out = NS + "<tool_call>\n";
  for (const auto& i : invokes) out += i;
  return out + NS + "</tool_call>";
}

ToolSpec tool(const std::string& name, const std::string& schema) {
  return {name, ordered_json::parse(schema)};
}

// The tools as an OpenAI request carries them, for the parser.
nlohmann::json openai_tools(const std::vector<ToolSpec>& tools) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tools)
    out.push_back({{"type", "function"},
                   {"function", {{"name", t.name}, {"parameters", nlohmann::json(t.parameters)}}}});
  return out;
}

// The parser's arguments for each call in `text`.
std::vector<std::string> parsed_arguments(const std::vector<ToolSpec>& tools, const std::string& text) {
  std::vector<std::string> args;
  for (const auto& call : ToolCallParser(openai_tools(tools)).parse(text).tool_calls)
    args.push_back(call.arguments_json);
  return args;
}

// One tool `f` with parameters `schema`; each (params, arguments) pair must be accepted and parse into those
// arguments; each params string in `bad` must be rejected.
void expect_params(const std::string& schema, const std::vector<std::pair<std::string, std::string>>& good,
                   const std::vector<std::string>& bad) {
  const std::vector<ToolSpec> tools = {tool("f", schema)};
  const Grammar g = tool_call_grammar(tools);
  for (const auto& [params, args] : good) {
    const std::string text = block({invoke("f", params)});
    EXPECT_TRUE(matches(g, text)) << "should accept: " << params;
    EXPECT_EQ(parsed_arguments(tools, text), std::vector<std::string>{args}) << params;
  }
  for (const auto& params : bad)
    EXPECT_FALSE(matches(g, block({invoke("f", params)}))) << "should reject: " << params;
}

std::string error_of(const std::vector<ToolSpec>& tools, std::string_view only = {}) {
  try {
    tool_call_grammar(tools, only);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "";
}

const char* kWeather =
    R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]})";

TEST(ToolCallGrammarBlock, InvokesParallelAndNamed) {
  const std::vector<ToolSpec> tools = {tool("get_weather", kWeather), tool("noop", R"({"type": "object"})")};
  const std::string paris = invoke("get_weather", param("city", "Paris"));
  const std::string noop = invoke("noop", "");
  const Grammar g = tool_call_grammar(tools);
  EXPECT_TRUE(matches(g, block({paris})));
  EXPECT_TRUE(
      matches(g, block({paris, noop, invoke("get_weather", param("city", "Rome") + param("days", "3"))})));
  EXPECT_FALSE(matches(g, block({})));
  EXPECT_FALSE(matches(g, "text" + block({paris})));
  EXPECT_FALSE(matches(g, block({paris}) + "\n"));
  EXPECT_FALSE(matches(g, block({invoke("other", "")})));
  EXPECT_FALSE(matches(g, block({invoke("noop", param("x", "1"))})));  // strict: no undeclared parameters
  EXPECT_FALSE(matches(g, NS + "<tool_call>" + paris + NS + "</tool_call>"));
  EXPECT_TRUE(matches(tool_call_grammar(tools, "noop", /*parallel=*/false), block({noop})));
  EXPECT_FALSE(matches(tool_call_grammar(tools, "noop", /*parallel=*/false), block({noop, noop})));
  const Grammar single = tool_call_grammar(tools, {}, /*parallel=*/false);
  EXPECT_TRUE(matches(single, block({noop})));
  EXPECT_FALSE(matches(single, block({paris, noop})));
  const Grammar named = tool_call_grammar(tools, "noop");
  EXPECT_TRUE(matches(named, block({noop, noop})));
  EXPECT_FALSE(matches(named, block({paris})));
  EXPECT_EQ(parsed_arguments(tools, block({paris, noop})),
            (std::vector<std::string>{R"({"city": "Paris"})", "{}"}));
}

TEST(ToolCallGrammarBlock, ContentFirstForAutoChoiceWithStrictTools) {
  const std::vector<ToolSpec> tools = {tool("get_weather", kWeather)};
  const Grammar g = tool_call_grammar(tools, {}, true, /*content_first=*/true);
  const std::string paris = block({invoke("get_weather", param("city", "Paris"))});
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "Just prose, with ] and <tags>."));
  EXPECT_TRUE(matches(g, "Let me check." + paris));
  EXPECT_TRUE(matches(g, paris));
  EXPECT_FALSE(matches(g, "Let me check." + NS + "stray"));  // the marker only opens the block
  EXPECT_FALSE(matches(g, "x" + block({invoke("get_weather", param("town", "Paris"))})));
  EXPECT_FALSE(matches(g, paris + "after"));
}

TEST(ToolCallGrammarStrings, RawTextWithoutTheMarker) {
  expect_params(
      kWeather,
      {{param("city", "Paris"), R"({"city": "Paris"})"},
       {param("city", ""), R"({"city": ""})"},
       {param("city", "line 1\nline \"2\"\t<b>x</b> é"), R"({"city": "line 1\nline \"2\"\t<b>x</b> é"})"},
       {param("city", "a[i]<b ]<] ]<]mini ]]<]<]minimax[> x]"),
        R"({"city": "a[i]<b ]<] ]<]mini ]]<]<]minimax[> x]"})"},
       {param("city", "]minimax[>[") + param("days", "-4"), R"({"city": "]minimax[>[", "days": -4})"}},
      {param("city", "a" + NS + "b"), param("city", NS), param("city", "x]<]<]minimax[>[<y>"),
       param("days", "3"), param("days", "3") + param("city", "Paris"), param("city", "\xC3")});
}

TEST(ToolCallGrammarStrings, LengthBounds) {
  const char* schema =
      R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}},
      "required": ["s"]})";
  expect_params(schema,
                {{param("s", "ab"), R"({"s": "ab"})"}, {param("s", "\xC3\xA9]]\n"), R"({"s": "é]]\n"})"}},
                {param("s", "a"), param("s", "abcde"), param("s", "a<b")});
  // minLength 1 alone keeps the exact marker rule.
  expect_params(
      R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 1}}, "required": ["s"]})",
      {{param("s", "<"), R"({"s": "<"})"}}, {param("s", "")});
}

TEST(ToolCallGrammarValues, ScalarsEnumsAndNull) {
  const char* schema = R"({"type": "object", "properties": {
      "n": {"type": "integer", "minimum": -5, "maximum": 250},
      "x": {"type": "number", "exclusiveMinimum": 0},
      "b": {"type": "boolean"},
      "color": {"enum": ["red", "dark blue"]},
      "level": {"type": "integer", "enum": [1, 2]},
      "gone": {"type": "null"},
      "nothing": {"type": "null"}}, "required": ["n", "nothing"]})";
  expect_params(schema,
                {{param("n", "-5") + param("nothing", "null"), R"({"n": -5, "nothing": null})"},
                 {param("n", "250") + param("x", "0.5") + param("b", "true") + param("color", "dark blue") +
                      param("level", "2") + param("nothing", "null"),
                  R"({"n": 250, "x": 0.5, "b": true, "color": "dark blue", "level": 2, "nothing": null})"},
                 {param("n", "0") + param("x", "2e3") + param("nothing", "null"),
                  R"({"n": 0, "x": 2000.0, "nothing": null})"}},
                {param("n", "-6") + param("nothing", "null"), param("n", "251") + param("nothing", "null"),
                 param("n", "007") + param("nothing", "null"), param("n", " 1") + param("nothing", "null"),
                 param("n", "1") + param("x", "0") + param("nothing", "null"),
                 param("n", "1") + param("b", "True") + param("nothing", "null"),
                 param("n", "1") + param("color", "blue") + param("nothing", "null"),
                 param("n", "1") + param("level", "3") + param("nothing", "null"),
                 param("n", "1") + param("gone", "null") + param("nothing", "null"), param("n", "1")});
  // Integers stop at int64 (what the parser reads).
  expect_params(R"({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]})",
                {{param("i", "-9223372036854775808"), R"({"i": -9223372036854775808})"}},
                {param("i", "9223372036854775808"), param("i", "1.0")});
}

TEST(ToolCallGrammarValues, NestedObjectsAndArrays) {
  const char* schema = R"({"type": "object", "properties": {
      "user": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
               "required": ["name"]},
      "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
      "grid": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}}, "required": ["ids"]})";
  expect_params(
      schema,
      {{param("ids", item("1")), R"({"ids": [1]})"},
       {param("user", param("name", "Ann") + param("age", "30")) + param("ids", item("1") + item("2")) +
            param("grid", item(item("true") + item("false")) + item("")),
        R"({"user": {"name": "Ann", "age": 30}, "ids": [1, 2], "grid": [[true, false], []]})"}},
      {param("ids", ""), param("ids", item("1") + item("2") + item("3")), param("ids", "[1]"),
       param("user", param("age", "30")) + param("ids", item("1")), param("ids", item("x")),
       param("ids", param("id", "1"))});
}

TEST(ToolCallGrammarAlternatives, ReadBackInSchemaOrder) {
  // Integer first: "5" reads as 5, other text as a string.
  expect_params(
      R"({"type": "object", "properties": {"v": {"type": ["integer", "string"]}}, "required": ["v"]})",
      {{param("v", "5"), R"({"v": 5})"}, {param("v", "abc"), R"({"v": "abc"})"}}, {});
  // A bounded integer first: a string that the parser would read as an out-of-range integer is refused.
  expect_params(
      R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 5},
      {"type": "string"}]}}, "required": ["v"]})",
      {{param("v", "3"), R"({"v": 3})"},
       {param("v", "abc"), R"({"v": "abc"})"},
       {param("v", ""), R"({"v": ""})"}},
      {param("v", "9"), param("v", " 9"), param("v", "-1"), param("v", "1.5")});
  // A constrained string first reads everything: the integer alternative is dropped.
  expect_params(R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 2},
      {"type": "integer"}]}}, "required": ["v"]})",
                {{param("v", "12"), R"({"v": "12"})"}}, {param("v", "12345")});
  // Null is read first wherever the schema allows it.
  expect_params(R"({"type": "object", "properties": {"v": {"type": ["string", "null"]}}, "required": ["v"]})",
                {{param("v", "null"), R"({"v": null})"}, {param("v", "x"), R"({"v": "x"})"}}, {});
  // An array first: strings may not look like JSON or start with a space (the parser would read them
  // as arrays); empty text is the empty array.
  expect_params(
      R"({"type": "object", "properties": {"v": {"type": ["array", "string"], "items": {"type": "integer"}}},
      "required": ["v"]})",
      {{param("v", item("1")), R"({"v": [1]})"},
       {param("v", "abc"), R"({"v": "abc"})"},
       {param("v", ""), R"({"v": []})"}},
      {param("v", "[1]"), param("v", "{}"), param("v", " x")});
  // A string first and no null: the parser streams raw text, so the array alternative is dropped.
  expect_params(
      R"({"type": "object", "properties": {"v": {"type": ["string", "array"]}}, "required": ["v"]})",
      {{param("v", "abc"), R"({"v": "abc"})"}}, {param("v", item("1"))});
  // A boolean first reads "1" and "0" as booleans: still valid values.
  expect_params(
      R"({"type": "object", "properties": {"v": {"type": ["boolean", "integer"]}}, "required": ["v"]})",
      {{param("v", "true"), R"({"v": true})"},
       {param("v", "1"), R"({"v": true})"},
       {param("v", "7"), R"({"v": 7})"}},
      {param("v", "yes")});
  // A typed string enum first reads all text: the integer alternative is dropped.
  expect_params(R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "string", "enum": ["a", "b"]},
      {"type": "integer"}]}}, "required": ["v"]})",
                {{param("v", "a"), R"({"v": "a"})"}}, {param("v", "5"), param("v", "c")});
  // A bounded integer before a bounded string: the string may not start like a number.
  expect_params(R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "maximum": 5},
      {"type": "string", "maxLength": 3}]}}, "required": ["v"]})",
                {{param("v", "-20"), R"({"v": -20})"},
                 {param("v", "a9"), R"({"v": "a9"})"},
                 {param("v", ""), R"({"v": ""})"}},
                {param("v", "9"), param("v", "12"), param("v", "abcd"), param("v", ".5")});
  // Only the first object alternative is kept (the parser reads every element tree with it).
  expect_params(R"({"type": "object", "properties": {"v": {"anyOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}]}}, "required": ["v"]})",
                {{param("v", param("a", "1")), R"({"v": {"a": 1}})"}}, {param("v", param("b", "true"))});
}

TEST(ToolCallGrammarObjects, AdditionalPropertiesAndAnyParameters) {
  expect_params(
      R"({"type": "object", "properties": {"env": {"type": "object", "additionalProperties": {"type": "integer"}},
      "name": {"type": "string"}}})",
      {{param("env", param("PATH_LEN", "3") + param("x.y-z", "4")),
        R"({"env": {"PATH_LEN": 3, "x.y-z": 4}})"}},
      {param("env", param("A", "x")), param("env", param("invoke", "1")), param("env", param("a b", "1")),
       param("env", param(std::string(65, 'k'), "1"))});
  // Listed names cannot come back as extras.
  expect_params(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})",
      {{param("a", "1") + param("b", "text"), R"({"a": 1, "b": "text"})"}},
      {param("a", "1") + param("a", "2")});
  // No schema: any parameters, as text.
  for (const char* params : {"null", "{}"}) {
    const std::vector<ToolSpec> tools = {tool("f", params)};
    const std::string text = block({invoke("f", param("q", "x") + param("n", "1"))});
    EXPECT_TRUE(matches(tool_call_grammar(tools), text));
    EXPECT_EQ(parsed_arguments(tools, text), std::vector<std::string>{R"({"q": "x", "n": "1"})"});
  }
}

TEST(ToolCallGrammarRefs, RecursiveDefinitions) {
  expect_params(
      R"({"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"],
      "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}})",
      {{param("tree", param("v", "1") + param("kids", item(param("v", "2")) + item(param("v", "3")))),
        R"({"tree": {"v": 1, "kids": [{"v": 2}, {"v": 3}]}})"}},
      {param("tree", param("kids", "")),
       param("tree", param("v", "1") + param("kids", item(param("v", "x"))))});
}

TEST(ToolCallGrammarErrors, MessagesNameTheTool) {
  const ToolSpec ok = tool("ok", kWeather);
  const std::vector<std::pair<ToolSpec, std::string>> cases = {
      {tool("t", R"({"type": "object", "properties": {"x": {"not": {}}}})"),
       "tools[1].parameters: unsupported keyword 'not' at /properties/x"},
      {tool("t", R"({"type": "object", "properties": {"p": {"type": "array", "prefixItems": [{}]}}})"),
       "tools[1].parameters: prefixItems is not supported in tool-call markup"},
      {tool("t", R"({"type": "object", "properties": {"a>b": {"type": "string"}}})"),
       "tools[1].parameters: property name 'a>b' cannot be written as a tool-call markup tag at the schema "
       "root"},
      {tool("t", R"({"type": "object", "properties": {"invoke": {"type": "string"}}})"),
       "property name 'invoke'"},
      {tool("t", R"({"type": "string"})"), "tools[1].parameters: must be the JSON schema of an object"},
      {tool("bad\"name", kWeather), "tools[1]: tool name 'bad\"name' cannot be written"},
      {tool("t", R"({"type": "object", "properties": {"n": {"type": "number", "maximum": 1}}})"),
       "tools[1].parameters: number bounds other than minimum 0"},
  };
  for (const auto& [bad, message] : cases) {
    SCOPED_TRACE(message);
    const std::string got = error_of({ok, bad});
    EXPECT_NE(got.find(message), std::string::npos) << got;
  }
  EXPECT_NE(error_of({ok}, "missing").find("tool_choice names 'missing', which is not among the tools"),
            std::string::npos);
  EXPECT_NE(error_of({}).find("no tools"), std::string::npos);
  // A named tool_choice compiles only that tool's schema.
  EXPECT_NO_THROW(tool_call_grammar({ok, cases[0].first}, "ok"));
}

std::vector<ToolSpec> claude_code_tools() {
  std::ifstream in("tests/fixtures/claude_code/session.json");
  EXPECT_TRUE(in.good());
  const ordered_json body =
      ordered_json::parse(std::string(std::istreambuf_iterator<char>(in), {}))["requests"][0]["body"];
  std::vector<ToolSpec> tools;
  for (const auto& t : body["tools"]) tools.push_back({t["name"], t["input_schema"]});
  return tools;
}

TEST(ToolCallGrammarClaudeCode, AllToolsAndRealCalls) {
  const std::vector<ToolSpec> tools = claude_code_tools();
  ASSERT_EQ(tools.size(), 12u);
  const Grammar g = tool_call_grammar(tools);
  const std::vector<std::pair<std::string, std::string>> good = {
      {invoke("Bash", param("command", "ls -la | grep \"x\" > out.txt 2>&1") + param("timeout", "120000") +
                          param("description", "List files")),
       R"({"command": "ls -la | grep \"x\" > out.txt 2>&1", "timeout": 120000, "description": "List files"})"},
      {invoke("Edit", param("file_path", "/src/a.cc") + param("old_string", "if (a[i]<b) {\n") +
                          param("new_string", "if (a[i] < b) {\n") + param("replace_all", "false")),
       R"({"file_path": "/src/a.cc", "old_string": "if (a[i]<b) {\n", "new_string": "if (a[i] < b) {\n", "replace_all": false})"},
      {invoke("Read",
              param("file_path", "/etc/hosts") + param("offset", "0") + param("limit", "9007199254740991")),
       R"({"file_path": "/etc/hosts", "offset": 0, "limit": 9007199254740991})"},
      {invoke("ReportFindings",
              param("level", "high") +
                  param("findings", item(param("file", "a.cc") + param("line", "-3") + param("summary", "s") +
                                         param("failure_scenario", "f")))),
       R"({"level": "high", "findings": [{"file": "a.cc", "line": -3, "summary": "s", "failure_scenario": "f"}]})"},
      {invoke("Workflow", param("script", "export const meta = {};") + param("args", "anything")),
       R"({"script": "export const meta = {};", "args": "anything"})"},
  };
  for (const auto& [call, args] : good) {
    const std::string text = block({call});
    EXPECT_TRUE(matches(g, text)) << call;
    EXPECT_EQ(parsed_arguments(tools, text), std::vector<std::string>{args});
  }
  const std::vector<std::string> bad = {
      invoke("Bash", param("timeout", "5")),                                // missing required
      invoke("Bash", param("command", "ls") + param("timeout", "soon")),    // wrong type
      invoke("Bash", param("description", "d") + param("command", "ls")),   // out of order
      invoke("Bash", param("command", "ls") + param("verbose", "true")),    // not declared
      invoke("Edit", param("file_path", "/a") + param("old_string", "x")),  // missing new_string
      invoke("Edit", param("file_path", "/a") + param("old_string", "x") + param("new_string", "y") +
                         param("replace_all", "yes")),
      invoke("Read", param("file_path", "/f") + param("offset", "-1")),
      invoke("Read", param("file_path", "/f") + param("limit", "0")),
      invoke("Read", param("file_path", "/f") + param("limit", "9007199254740992")),
      invoke("ListAgents", param("cursor", std::string(257, 'c'))),  // over maxLength
      invoke("Agent", param("description", "d") + param("prompt", "p") + param("model", "gpt")),
  };
  for (const auto& call : bad) EXPECT_FALSE(matches(g, block({call}))) << call;
  EXPECT_TRUE(matches(g, block({invoke("ListAgents", param("cursor", std::string(256, 'c')))})));
}

}  // namespace
}  // namespace m3::grammar
