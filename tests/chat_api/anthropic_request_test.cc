// convert_anthropic_request: where system text lands (top-level first; inline role "system" entries folded
// into the neighbouring user turn or tool result), volatile billing blocks dropped, tools / tool_choice /
// thinking mapped, and every refusal naming its field.
#include <gtest/gtest.h>

#include "chat/api/anthropic_request.h"
#include "common/error.h"

namespace m3 {
namespace {

using nlohmann::ordered_json;

ordered_json msgs(const ordered_json& body) {
  return convert_anthropic_request(body).messages;
}

TEST(AnthropicRequest, TopLevelSystemBlocksJoinAndDropTheBillingHeader) {
  const ordered_json body = {
      {"system",
       {{{"type", "text"}, {"text", "x-anthropic-billing-header: cc_version=2.1.332; cch=abc;"}},
        {{"type", "text"}, {"text", "You are Claude Code."}, {"cache_control", {{"type", "ephemeral"}}}},
        {{"type", "text"}, {"text", "Be brief."}}}},
      {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "You are Claude Code.\nBe brief.");
  EXPECT_EQ(m[1]["content"], "hi");
}

TEST(AnthropicRequest, InlineSystemAfterAUserTurnJoinsIt) {
  const ordered_json body = {
      {"messages",
       {{{"role", "user"}, {"content", "list files"}},
        {{"role", "system"}, {"content", "<system-reminder>cwd is /tmp</system-reminder>"}},
        {{"role", "assistant"}, {"content", "ok"}},
        {{"role", "user"}, {"content", "thanks"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["role"], "user");
  EXPECT_EQ(m[0]["content"], "list files\n\n<system-reminder>cwd is /tmp</system-reminder>");
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "thanks");
}

TEST(AnthropicRequest, InlineSystemAfterAnAssistantTurnOpensTheNextUserTurn) {
  const ordered_json body = {{"system", "sys"},
                             {"messages",
                              {{{"role", "system"}, {"content", {{{"type", "text"}, {"text", "first"}}}}},
                               {{"role", "user"}, {"content", "q1"}},
                               {{"role", "assistant"}, {"content", "a1"}},
                               {{"role", "system"}, {"content", "between"}},
                               {{"role", "user"}, {"content", "q2"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["content"], "sys");  // the top-level prompt is never merged with inline text
  EXPECT_EQ(m[1]["content"], "first\n\nq1");
  EXPECT_EQ(m[3]["content"], "between\n\nq2");
}

TEST(AnthropicRequest, InlineSystemAfterToolResultsJoinsTheLastResult) {
  const ordered_json body = {
      {"messages",
       {{{"role", "user"}, {"content", "run it"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "tool_use"}, {"id", "t1"}, {"name", "Bash"}, {"input", {{"command", "ls"}}}}}}},
        {{"role", "user"},
         {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", "a.txt"}}}}},
        {{"role", "system"}, {"content", "note"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["content"], "a.txt\n\nnote");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], "{\"command\":\"ls\"}");
}

TEST(AnthropicRequest, TrailingInlineSystemAfterAssistantBecomesAUserTurn) {
  const ordered_json body = {{"messages",
                              {{{"role", "user"}, {"content", "q"}},
                               {{"role", "assistant"}, {"content", "a"}},
                               {{"role", "system"}, {"content", "continue"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2]["role"], "user");
  EXPECT_EQ(m[2]["content"], "continue");
}

TEST(AnthropicRequest, ABillingOnlySystemEntryAddsNothing) {
  const ordered_json body = {{"messages",
                              {{{"role", "user"}, {"content", "q"}},
                               {{"role", "system"}, {"content", "x-anthropic-billing-header: cch=1;"}}}}};
  const ordered_json m = msgs(body);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["content"], "q");
}

TEST(AnthropicRequest, ThinkingBudgetAndMode) {
  ordered_json body = {{"messages", {{{"role", "user"}, {"content", "q"}}}},
                       {"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}}};
  AnthropicChat c = convert_anthropic_request(body);
  EXPECT_EQ(c.kwargs["thinking_mode"], "enabled");
  ASSERT_TRUE(c.thinking_budget.has_value());
  EXPECT_EQ(*c.thinking_budget, 2048);
  body["thinking"] = {{"type", "disabled"}, {"budget_tokens", 2048}};
  EXPECT_FALSE(convert_anthropic_request(body).thinking_budget.has_value());
  body["thinking"] = {{"type", "adaptive"}};
  EXPECT_FALSE(convert_anthropic_request(body).thinking_budget.has_value());
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", -1}};
  try {
    convert_anthropic_request(body);
    FAIL() << "a negative budget was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.param(), "thinking.budget_tokens");
  }
}

TEST(AnthropicRequest, ToolChoiceNarrowsOrRefuses) {
  ordered_json body = {{"messages", {{{"role", "user"}, {"content", "q"}}}},
                       {"tools",
                        {{{"name", "a"}, {"input_schema", {{"type", "object"}}}},
                         {{"name", "b"}, {"input_schema", {{"type", "object"}}}}}},
                       {"tool_choice", {{"type", "tool"}, {"name", "b"}}}};
  AnthropicChat c = convert_anthropic_request(body);
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0]["function"]["name"], "b");
  EXPECT_EQ(c.tool_choice, "tool");
  body["tool_choice"] = {{"type", "tool"}, {"name", "zzz"}};
  EXPECT_THROW(convert_anthropic_request(body), Error);
  body.erase("tools");
  body["tool_choice"] = {{"type", "any"}};
  EXPECT_THROW(convert_anthropic_request(body), Error);
}

TEST(AnthropicRequest, RefusalsNameTheMessage) {
  const ordered_json body = {
      {"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "robot"}, {"content", "x"}}}}};
  try {
    convert_anthropic_request(body);
    FAIL() << "role robot was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].role"), std::string::npos) << e.what();
    EXPECT_EQ(e.param(), "messages");
  }
}

}  // namespace
}  // namespace m3
