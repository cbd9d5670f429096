// ToolCallParser: the spec's examples (serving-api.md §2.5, §4.1, the template's own example), round trips of
// the golden rendered histories, the OpenAI delta shape, malformed and cut-off output, and linear cost.
#include <cctype>
#include <chrono>
#include <random>

#include "parser_test_util.h"

namespace m3::test {
namespace {

const std::string NS(kMinimaxNamespace);

nlohmann::json weather_tools() {
  return nlohmann::json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather for a city.", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");
}

ToolParseResult parse(const nlohmann::json& tools, std::string_view text) {
  return ToolCallParser(tools, counter_ids()).parse(text);
}

ChainResult stream_tools(const nlohmann::json& tools, const std::vector<std::string_view>& chunks) {
  ToolCallParser p(tools, counter_ids());
  std::string content;
  DeltaCollector c;
  for (auto ch : chunks) c.add(p.push(ch), content);
  c.add(p.finish(), content);
  return {std::nullopt, content, c.calls};
}

ChainResult whole_tools(const nlohmann::json& tools, std::string_view text) {
  auto r = parse(tools, text);
  return {std::nullopt, r.content, r.tool_calls};
}

TEST(chat_parsers_ToolCalls, SpecWorkedExample) {
  // §2.5: the model output after an adaptive generation prompt, through both parsers.
  std::string out = "<mm:think>Need the tool.</mm:think>" + NS + "<tool_call>\n" + NS +
                    "<invoke name=\"get_weather\">" + NS + "<city>Paris" + NS + "</city>" + NS +
                    "</invoke>\n" + NS + "</tool_call>";
  ChainResult r = run_whole(out, ThinkingStart::kAdaptive, weather_tools());
  EXPECT_EQ(r.reasoning, "Need the tool.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, "call_0");
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"city": "Paris"})");
}

TEST(chat_parsers_ToolCalls, SpecFormatSection41) {
  auto tools = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "FUNC_A", "parameters": {"type": "object", "properties": {
       "arg1": {"type": "string"}, "arg2": {"type": "array", "items": {"type": "integer"}}}}}},
    {"type": "function", "function": {"name": "FUNC_B", "parameters": {"type": "object", "properties": {}}}}])");
  std::string out = "Some text." + NS + "<tool_call>\n" + NS + "<invoke name=\"FUNC_A\">" + NS +
                    "<arg1>VALUE" + NS + "</arg1>" + NS + "<arg2>" + NS + "<item>1" + NS + "</item>" + NS +
                    "<item>2" + NS + "</item>" + NS + "</arg2>" + NS + "</invoke>\n" + NS +
                    "<invoke name=\"FUNC_B\">" + NS + "</invoke>\n" + NS + "</tool_call>";
  auto r = parse(tools, out);
  EXPECT_EQ(r.content, "Some text.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "FUNC_A");
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"arg1": "VALUE", "arg2": [1, 2]})");
  EXPECT_EQ(r.tool_calls[1].name, "FUNC_B");
  EXPECT_EQ(r.tool_calls[1].arguments_json, "{}");
  EXPECT_EQ(r.tool_calls[1].id, "call_1");
}

TEST(chat_parsers_ToolCalls, TemplateExampleWithoutSchemas) {
  // The example block the template puts in every tools prompt, taken from a golden rendering. Its tools are
  // not declared, so structure comes from the tags alone: <item> children make a list, other children an
  // object.
  auto goldens = read_json("tests/fixtures/minimax-m3/goldens.json");
  std::string rendered = goldens["conversations"][4]["rendered"];
  size_t from = rendered.find("Example:\n\n");
  ASSERT_NE(from, std::string::npos);
  from += 10;
  std::string example = rendered.substr(from, rendered.find("[e~[", from) - from);
  auto r = parse(nlohmann::json::array(), example);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "tool-name-1");
  EXPECT_EQ(r.tool_calls[0].arguments_json,
            R"({"param-1": "value-1", "param-2": [{"key-a": "val-a", "key-b": "val-b"}]})");
  EXPECT_EQ(r.tool_calls[1].name, "tool-name-2");
  EXPECT_EQ(r.tool_calls[1].arguments_json, R"({"param-1": "value-1"})");
}

TEST(chat_parsers_ToolCalls, GoldenHistoriesRoundTrip) {
  // Assistant turns the real template rendered from OpenAI messages parse back to those messages.
  auto goldens = read_json("tests/fixtures/minimax-m3/goldens.json");
  int turns = 0;
  for (const auto& conv : goldens["conversations"]) {
    std::vector<nlohmann::json> assistants;
    for (const auto& m : conv["messages"]) {
      if (m["role"] == "assistant") assistants.push_back(m);
    }
    std::string rendered = conv["rendered"];
    const nlohmann::json tools = conv.contains("tools") ? conv["tools"] : nlohmann::json::array();
    size_t pos = 0, k = 0;
    while ((pos = rendered.find("]~b]ai\n", pos)) != std::string::npos && k < assistants.size()) {
      pos += 7;
      size_t end = rendered.find("[e~[", pos);
      if (end == std::string::npos) break;
      std::string turn = rendered.substr(pos, end - pos);
      const auto& msg = assistants[k++];
      SCOPED_TRACE(turn);
      ChainResult r = run_whole(turn, ThinkingStart::kAdaptive, tools);
      const auto& calls = msg.contains("tool_calls") ? msg["tool_calls"] : nlohmann::json::array();
      ASSERT_EQ(r.tool_calls.size(), calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(r.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>());
        EXPECT_EQ(nlohmann::json::parse(r.tool_calls[i].arguments_json), calls[i]["function"]["arguments"]);
      }
      std::string content = msg["content"].is_string() ? msg["content"].get<std::string>() : "";
      size_t close = content.rfind("</mm:think>");
      if (close != std::string::npos) content = content.substr(close + 11);
      EXPECT_EQ(r.content, content);
      ++turns;
    }
  }
  EXPECT_GE(turns, 4);
}

TEST(chat_parsers_ToolCalls, StreamingDeltaShape) {
  ToolCallParser p(weather_tools(), counter_ids());
  auto d = p.push("Checking." + NS + "<tool_call>\n" + NS + "<invoke name=\"get_weather\">");
  EXPECT_EQ(d.content, "Checking.");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0u);
  EXPECT_EQ(d.tool_calls[0].id, "call_0");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{");
  EXPECT_EQ(p.tool_call_count(), 1u);
  // String parameters stream as they arrive (a possible marker prefix is held back)...
  d = p.push(NS + "<city>San Fr");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls[0].id.empty());
  EXPECT_EQ(d.tool_calls[0].arguments, R"("city": "San Fr)");
  d = p.push("ancisco \"CA\"]<]mini");
  EXPECT_EQ(d.tool_calls[0].arguments, R"(ancisco \"CA\")");
  d = p.push("max[>[</city>");
  EXPECT_EQ(d.tool_calls[0].arguments, "\"");
  // ...other types when complete.
  d = p.push(NS + "<days>1");
  EXPECT_TRUE(d.empty());
  d = p.push("4" + NS + "</days>");
  EXPECT_EQ(d.tool_calls[0].arguments, R"(, "days": 14)");
  d = p.push(NS + "</invoke>\n" + NS + "<invoke name=\"get_weather\">");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].arguments, "}");
  EXPECT_EQ(d.tool_calls[1].index, 1u);
  EXPECT_EQ(d.tool_calls[1].id, "call_1");
  d = p.push(NS + "</invoke>\n" + NS + "</tool_call>");
  EXPECT_EQ(d.tool_calls[0].arguments, "}");
  EXPECT_TRUE(p.finish().empty());
}

TEST(chat_parsers_ToolCalls, BlockStartIsHeldUntilConfirmed) {
  ToolCallParser p(weather_tools(), counter_ids());
  EXPECT_EQ(p.push("Hi ]<]minimax[").content, "Hi ");
  EXPECT_TRUE(p.push(">[<tool_call>\n").empty());
  EXPECT_EQ(p.push("  plain words").content, NS + "<tool_call>\n  plain words");
  EXPECT_EQ(p.tool_call_count(), 0u);
}

TEST(chat_parsers_ToolCalls, DefaultIdsLookLikeOpenAi) {
  ToolCallParser p(weather_tools());
  auto r = p.parse(NS + "<tool_call>\n" + NS + "<invoke name=\"get_weather\">" + NS + "</invoke>\n" + NS +
                   "<invoke name=\"get_weather\">" + NS + "</invoke>\n" + NS + "</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  for (const auto& c : r.tool_calls) {
    ASSERT_EQ(c.id.size(), 29u);
    EXPECT_EQ(c.id.substr(0, 5), "call_");
    for (char ch : c.id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << c.id;
  }
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
}

TEST(chat_parsers_ToolCalls, ParseIsIndependentOfStreamingState) {
  ToolCallParser p(weather_tools(), counter_ids());
  p.push(NS + "<tool_call>\n" + NS + "<invoke name=\"get_weather\">");
  auto r = p.parse("just text");
  EXPECT_EQ(r.content, "just text");
  EXPECT_TRUE(r.tool_calls.empty());
  auto d = p.push(NS + "<city>X" + NS + "</city>");
  EXPECT_EQ(d.tool_calls.at(0).arguments, R"("city": "X")");
}

TEST(chat_parsers_ToolCalls, NoToolsAndMalformedToolLists) {
  const char* lists[] = {
      "[]",
      "null",
      "{}",
      "[1, \"x\", null]",
      R"([{"function": {"name": 5}}])",
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": [1, 2]}}])",
      R"([{"name": "get_weather", "parameters": {"type": "object", "properties": 7}}])",
      R"([{"name": "get_weather", "parameters": {"$ref": "#/nowhere"}}])",
      R"([{"name": "get_weather", "parameters": {"$ref": "#"}}])",
      R"([{"name": "get_weather", "parameters": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}}])",
      R"([{"name": "get_weather", "parameters": {"properties": {"city": {"$ref": "#/properties/city"}}}}])"};
  std::string out = NS + "<tool_call>\n" + NS + "<invoke name=\"get_weather\">" + NS + "<city>" + NS +
                    "<x>1" + NS + "</x>" + NS + "</city>" + NS + "<days>2" + NS + "</days>" + NS +
                    "</invoke>\n" + NS + "</tool_call>";
  for (const char* l : lists) {
    SCOPED_TRACE(l);
    auto r = parse(nlohmann::json::parse(l), out);
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_TRUE(nlohmann::json::parse(r.tool_calls[0].arguments_json).is_object());
  }
}

TEST(chat_parsers_ToolCalls, InvokeWithoutWrapperStillParses) {
  auto r = parse(weather_tools(), "Sure." + NS + "<invoke name=\"get_weather\">" + NS + "<city>Oslo" + NS +
                                      "</city>" + NS + "</invoke>");
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"city": "Oslo"})");
}

TEST(chat_parsers_ToolCalls, InvokeNameForms) {
  for (std::string header :
       {"<invoke name='get_weather'>", "<invoke name=get_weather>", "<invoke  name = \"get_weather\" >"}) {
    auto r = parse(weather_tools(), NS + "<tool_call>" + NS + header + NS + "<days>3" + NS + "</days>" + NS +
                                        "</invoke>" + NS + "</tool_call>");
    ASSERT_EQ(r.tool_calls.size(), 1u) << header;
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.tool_calls[0].arguments_json, R"({"days": 3})");
  }
  // No usable name: not a call; before any call it is plain text.
  auto r = parse(weather_tools(), NS + "<tool_call>\n" + NS + "<invoke name=\"\">" + NS + "</invoke>");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, NS + "<tool_call>\n" + NS + "<invoke name=\"\">" + NS + "</invoke>");
}

TEST(chat_parsers_ToolCalls, StringEscapingIsValidJson) {
  std::string nasty = "quote\" back\\slash \b\f\n\r\t ctrl\x01\x1f del\x7f é 中 😀 </city> <city>";
  auto r = parse(weather_tools(), NS + "<tool_call>" + NS + "<invoke name=\"get_weather\">" + NS + "<city>" +
                                      nasty + NS + "</city>" + NS + "</invoke>" + NS + "</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  auto args = nlohmann::json::parse(r.tool_calls[0].arguments_json);
  EXPECT_EQ(args["city"], nasty);
  EXPECT_NE(r.tool_calls[0].arguments_json.find("\\u0001"), std::string::npos);
  EXPECT_NE(r.tool_calls[0].arguments_json.find("中"), std::string::npos);  // ensure_ascii=False
}

// A small grammar-aware fuzzer: random sequences of the format's fragments, whole vs streamed.
TEST(chat_parsers_ToolCalls, RandomFragmentSoupStreamsLikeWhole) {
  const std::vector<std::string> frags = {NS,
                                          NS + "<tool_call>",
                                          NS + "</tool_call>",
                                          NS + "<invoke name=\"get_weather\">",
                                          NS + "<invoke name=\"nope\">",
                                          NS + "</invoke>",
                                          NS + "<city>",
                                          NS + "</city>",
                                          NS + "<days>",
                                          NS + "</days>",
                                          NS + "<item>",
                                          NS + "</item>",
                                          "\n",
                                          " ",
                                          "x",
                                          "12",
                                          "null",
                                          "[1,",
                                          "{\"a\":",
                                          "<",
                                          ">",
                                          "]<]",
                                          "mini",
                                          "max[>[",
                                          "é",
                                          "/"};
  auto tools = weather_tools();
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) text += frags[rng() % frags.size()];
    ChainResult whole = whole_tools(tools, text);
    for (const auto& c : whole.tool_calls) {
      ASSERT_FALSE(nlohmann::json::parse(c.arguments_json, nullptr, false).is_discarded()) << text;
    }
    ChainResult s = stream_tools(tools, split_at(text, random_cuts(text.size(), rng)));
    ASSERT_EQ(s, whole) << text;
    ASSERT_EQ(stream_tools(tools, bytes_of(text)), whole) << text;
  }
}

class Timer {
 public:
  ~Timer() { EXPECT_LT(std::chrono::steady_clock::now() - t0_, std::chrono::seconds(20)); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

size_t stream_bytes(const nlohmann::json& tools, const std::string& text, size_t step) {
  ToolCallParser p(tools, counter_ids());
  size_t out = 0;
  for (size_t i = 0; i < text.size(); i += step) {
    auto d = p.push(std::string_view(text).substr(i, step));
    out += d.content.size();
    for (auto& c : d.tool_calls) out += c.arguments.size();
  }
  auto d = p.finish();
  for (auto& c : d.tool_calls) out += c.arguments.size();
  return out + d.content.size();
}

TEST(chat_parsers_ToolCalls, LongStringParamByteByByte) {
  Timer t;
  std::string text = NS + "<tool_call>" + NS + "<invoke name=\"get_weather\">" + NS + "<city>";
  text += std::string(2u << 20, 'a') + "]<]minimax";  // ends in a partial marker, cut off
  EXPECT_GT(stream_bytes(weather_tools(), text, 1), 2u << 20);
}

TEST(chat_parsers_ToolCalls, PathologicalInputsStayLinear) {
  auto tools =
      nlohmann::json::parse(R"([{"name": "get_weather", "parameters": {"type": "object", "properties": {
      "days": {"type": "array", "items": {"type": "integer"}}, "x": {"type": "object"}}}}])");
  std::vector<std::string> inputs;
  auto head = NS + "<tool_call>" + NS + "<invoke name=\"get_weather\">";
  std::string s;
  for (int i = 0; i < 100000; ++i)
    s += NS + "<p" + std::to_string(i) + ">" + std::to_string(i) + NS + "</p" + std::to_string(i) + ">";
  inputs.push_back(head + s);  // many parameters
  s.clear();
  for (int i = 0; i < 100000; ++i) s += NS + "<a>";
  inputs.push_back(head + NS + "<x>" + s);  // deep nesting, never closed
  s.clear();
  for (int i = 0; i < 100000; ++i) s += NS + "<item>" + std::to_string(i) + NS + "</item>";
  inputs.push_back(head + NS + "<days>" + s + NS + "</days>");                         // huge list
  inputs.push_back(head + NS + "<days>" + std::string(100000, '[') + NS + "</days>");  // deep JSON text
  s.clear();
  for (int i = 0; i < 200000; ++i) s += NS;
  inputs.push_back(s);  // markers only
  s.clear();
  for (int i = 0; i < 20000; ++i) s += NS + "<" + std::string(200, 'k');
  inputs.push_back(s);  // long unterminated tags
  s.clear();
  for (int i = 0; i < 100000; ++i) s += NS + "<tool_call>\n";
  inputs.push_back(s);  // openers never confirmed
  s.clear();
  for (int i = 0; i < 50000; ++i) s += NS + "<invoke name=\"get_weather\">";
  inputs.push_back(s);  // many calls
  for (const auto& in : inputs) {
    Timer t;
    stream_bytes(tools, in, 7);
    auto r = ToolCallParser(tools, counter_ids()).parse(in);
    for (const auto& c : r.tool_calls)
      ASSERT_FALSE(nlohmann::json::parse(c.arguments_json, nullptr, false).is_discarded());
  }
}

}  // namespace
}  // namespace m3::test
