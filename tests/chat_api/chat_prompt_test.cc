// render_chat_prompt: a conversation the template refuses is a 400 naming the first message it cannot render,
// with the template author's own words kept and the interpreter's internals not shown; and, over a recorded
// Claude Code session, every turn's prompt extends the previous turn's (what prefix caching reuses).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "chat/api/anthropic_request.h"
#include "chat/api/chat_prompt.h"
#include "common/error.h"

namespace m3 {
namespace {

using nlohmann::ordered_json;

const std::string kModelDir = "tests/fixtures/minimax-m3";

struct RealModel {
  Tokenizer tok = Tokenizer::load(kModelDir + "/tokenizer.json");
  chat::ChatTemplate tmpl = chat::ChatTemplate::from_file(kModelDir + "/chat_template.jinja");
  std::string bos = "]~!b[", eos = "[e~[";
  PromptModel model() const { return {tok, tmpl, bos, eos}; }
};

const RealModel& real() {
  static const RealModel m;
  return m;
}

std::string refusal(const PromptModel& model, const ordered_json& messages) {
  try {
    render_chat_prompt(model, messages, ordered_json(), true, ordered_json());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.param(), "messages");
    return e.what();
  }
  ADD_FAILURE() << "the conversation was rendered";
  return "";
}

TEST(ChatPrompt, TheTemplateAuthorsExceptionNamesTheMessage) {
  const ordered_json messages = {{{"role", "user"}, {"content", "q"}},
                                 {{"role", "tool"}, {"tool_call_id", "x"}, {"content", "r"}}};
  const std::string what = refusal(real().model(), messages);
  EXPECT_NE(what.find("messages[1]: "), std::string::npos) << what;
  EXPECT_NE(what.find("no previous assistant message with a tool call"), std::string::npos) << what;
}

TEST(ChatPrompt, InterpreterErrorsAreNotShownToTheClient) {
  // Indexing an undefined value is an interpreter error; it happens only for the second message.
  const chat::ChatTemplate tmpl = chat::ChatTemplate::from_string(
      "{% for m in messages %}{% if loop.index0 == 1 %}{{ m.nothing.deeper[3] }}{% endif %}"
      "{{ m.content }}{% endfor %}");
  const std::string bos, eos;
  const PromptModel model{real().tok, tmpl, bos, eos};
  const std::string what =
      refusal(model, {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  EXPECT_NE(what.find("messages[1] cannot be rendered by the model's chat template"), std::string::npos)
      << what;
  EXPECT_EQ(what.find("line"), std::string::npos) << "template internals leaked: " << what;
  EXPECT_EQ(what.find("undefined"), std::string::npos) << "template internals leaked: " << what;
}

// Prefix caching only pays if an agent's next turn renders to a prompt that starts with this turn's: the
// recorded Claude Code session (system entries inside messages, a volatile billing block, blocks that become
// strings once they are history, thinking blocks sent back) must keep that property, token for token.
TEST(ChatPrompt, EachClaudeCodeTurnExtendsThePreviousPrompt) {
  std::ifstream in("tests/fixtures/claude_code/session.json");
  ASSERT_TRUE(in.good()) << "tests/fixtures/claude_code/session.json is missing";
  const ordered_json session = ordered_json::parse(in);
  const auto& requests = session.at("requests");
  ASSERT_GE(requests.size(), 4u);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& r : requests) {
    const AnthropicChat conv = convert_anthropic_request(r.at("body"));
    prompts.push_back(render_chat_prompt(real().model(), conv.messages, conv.tools, true, conv.kwargs).ids);
  }
  for (size_t i = 0; i + 1 < prompts.size(); ++i) {
    const auto& a = prompts[i];
    const auto& b = prompts[i + 1];
    ASSERT_GT(b.size(), a.size()) << "request " << i + 1 << " adds to request " << i;
    size_t same = 0;
    while (same < a.size() && a[same] == b[same]) ++same;
    EXPECT_EQ(same, a.size()) << "request " << i + 1 << "'s prompt leaves request " << i << "'s at token "
                              << same << " of " << a.size() << ": "
                              << real().tok.decode(std::vector<int32_t>(
                                     a.begin() + same, a.begin() + std::min(a.size(), same + 20)));
  }
}

}  // namespace
}  // namespace m3
