// Tests of the OpenAI -> template message mapping (vLLM's preparation) and of vLLM's content-format
// detection.
#include <string>

#include <gtest/gtest.h>

#include "chat/template/chat_template.h"
#include "chat/template/message_mapping.h"

namespace m3::chat {
namespace {

using json = nlohmann::ordered_json;

TEST(MessageMapping, OpenAIFormatWrapsContentInParts) {
  json in = json::parse(R"([
    {"role": "user", "content": "hi", "extra": 1},
    {"role": "user", "content": [{"type": "text", "text": "a"}, "b", {"type": "image_url", "image_url": {"url": "x"}}]},
    {"role": "assistant", "content": null}
  ])");
  json out = normalize_messages(in, ContentFormat::kOpenAI);
  EXPECT_EQ(out[0], json::parse(R"({"role": "user", "content": [{"type": "text", "text": "hi"}]})"));
  EXPECT_EQ(out[1]["content"], json::parse(R"([{"type": "text", "text": "a"}, "b", {"type": "image"}])"));
  EXPECT_EQ(out[2]["content"], json::array());
}

TEST(MessageMapping, StringFormatJoinsTextParts) {
  json in = json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                            {"role": "assistant", "content": null}])");
  json out = normalize_messages(in, ContentFormat::kString);
  EXPECT_EQ(out[0]["content"], "a\nb");
  EXPECT_EQ(out[1]["content"], "");
  json image =
      json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  try {
    normalize_messages(image, ContentFormat::kString);
    FAIL();
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

TEST(MessageMapping, ToolCallArgumentsAndReasoning) {
  json in = json::parse(R"([{"role": "assistant", "content": "", "reasoning": "think",
    "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"city\": \"Paris\", \"n\": [1, 2]}"}},
      {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
      {"id": "3", "type": "function", "function": {"name": "h", "arguments": ""}},
      {"id": "4", "type": "function", "function": {"name": "k"}},
      {"id": "5", "type": "function", "function": {"name": "m", "arguments": {"already": "object"}}}]},
    {"role": "assistant", "content": "x", "reasoning_content": "rc"},
    {"role": "tool", "tool_call_id": "1", "content": "r", "name": "f"}])");
  json out = normalize_messages(in, ContentFormat::kOpenAI);
  const json& calls = out[0]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["arguments"], json::parse(R"({"city": "Paris", "n": [1, 2]})"));
  EXPECT_EQ(calls[0]["function"]["arguments"].begin().key(), "city");  // key order kept
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");
  EXPECT_EQ(calls[2]["function"]["arguments"], json::object());
  EXPECT_EQ(calls[3]["function"]["arguments"], json::object());
  EXPECT_EQ(calls[4]["function"]["arguments"], json::parse(R"({"already": "object"})"));
  EXPECT_EQ(out[0]["reasoning_content"], "think");
  EXPECT_EQ(out[0]["reasoning"], "think");
  EXPECT_EQ(out[1]["reasoning_content"], "rc");
  EXPECT_EQ(out[2]["tool_call_id"], "1");
  EXPECT_EQ(out[2]["name"], "f");
  EXPECT_FALSE(in[0]["tool_calls"][0]["function"]["arguments"].is_object());  // input untouched
}

TEST(MessageMapping, RejectsMalformedMessages) {
  EXPECT_THROW(normalize_messages(json::parse(R"([{"content": "no role"}])"), ContentFormat::kOpenAI),
               m3::Error);
  EXPECT_THROW(normalize_messages(json::parse(R"([{"role": "user", "content": 5}])"), ContentFormat::kOpenAI),
               m3::Error);
  EXPECT_THROW(normalize_messages(json::parse(R"([{"role": "user", "content": [{"type": "weird"}]}])"),
                                  ContentFormat::kOpenAI),
               m3::Error);
  EXPECT_THROW(normalize_messages(json::parse(R"({"role": "user"})"), ContentFormat::kOpenAI), m3::Error);
}

TEST(MessageMapping, ToolsAsVllmSerialisesThem) {
  json tools =
      json::parse(R"([{"function": {"parameters": {"type": "object"}, "name": "f", "strict": true}}])");
  json out = normalize_tools(tools);
  EXPECT_EQ(
      out[0].dump(),
      R"({"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object"},"strict":true}})");
  EXPECT_TRUE(normalize_tools(json()).is_null());
  EXPECT_THROW(normalize_tools(json::parse(R"([{"type": "function"}])")), m3::Error);
}

TEST(MessageMapping, NormalisedMessagesRenderLikeRawOnes) {
  ChatTemplate tpl = ChatTemplate::from_file("tests/fixtures/minimax-m3/chat_template.jinja");
  json raw = json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"a": 1}}}]}, {"role": "tool", "content": "r"}])");
  json openai = raw;
  openai[2]["tool_calls"][0]["function"]["arguments"] = R"({"a": 1})";
  ChatRenderInput a, b;
  a.messages = raw;
  b.messages = normalize_messages(openai, tpl.content_format());
  EXPECT_EQ(tpl.render(a), tpl.render(b));
}

TEST(ContentFormat, DetectsLoopsOverMessageContent) {
  auto detect = [](const std::string& src) { return detect_content_format(jinja::Template(src).body()); };
  EXPECT_EQ(detect("{% for m in messages %}{{ m.content }}{% endfor %}"), ContentFormat::kString);
  EXPECT_EQ(detect("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"),
            ContentFormat::kOpenAI);
  EXPECT_EQ(
      detect(
          "{% set ms = messages[1:] %}{% for m in ms %}{% for p in m['content'] %}{% endfor %}{% endfor %}"),
      ContentFormat::kOpenAI);
  EXPECT_EQ(detect("{% for p in content %}{% endfor %}"), ContentFormat::kString);
}

TEST(ChatTemplateApi, ContextAndErrors) {
  ChatTemplate tpl = ChatTemplate::from_string(
      "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ extra }}|"
      "{{ messages|length }}");
  ChatRenderInput in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.add_generation_prompt = false;
  in.kwargs = json{{"extra", "E"}};
  EXPECT_EQ(tpl.render(in), "<s>|</s>|None|None|False|E|0");
  in.kwargs = json{{"messages", json::array()}};
  EXPECT_THROW(tpl.render(in), m3::Error);
  try {
    ChatTemplate::from_file("tests/fixtures/chat_template/does-not-exist.jinja");
    FAIL();
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
  try {
    ChatTemplate::from_string("{% if %}");
    FAIL();
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace m3::chat
