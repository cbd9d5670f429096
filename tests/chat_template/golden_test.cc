// Golden tests: the released MiniMax-M3 template byte-exact against HF transformers' apply_chat_template
// (fixtures/minimax-m3/goldens.json, and fixtures/chat_template/extra_goldens.json once generated), and the
// interpreter against jinja2 in HF's configuration (fixtures/chat_template/jinja_cases.json).
#include <string>

#include <gtest/gtest.h>

#include "chat/template/chat_template.h"
#include "test_util.h"

namespace m3::chat {
namespace {

const char* kTemplatePath = "tests/fixtures/minimax-m3/chat_template.jinja";
const char* kBos = "]~!b[";
const char* kEos = "[e~[";

ChatRenderInput input_of(const nlohmann::ordered_json& conv) {
  ChatRenderInput in;
  in.messages = conv.at("messages");
  in.tools = conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json();
  in.add_generation_prompt = conv.value("add_generation_prompt", true);
  in.kwargs = conv.contains("kwargs") ? conv["kwargs"] : nlohmann::ordered_json();
  in.bos_token = kBos;
  in.eos_token = kEos;
  return in;
}

void check_conversations(const std::string& path) {
  ChatTemplate tpl = ChatTemplate::from_file(kTemplatePath);
  nlohmann::ordered_json doc = test::read_json(path);
  const auto& convs = doc.at("conversations");
  ASSERT_FALSE(convs.empty());
  size_t k = 0;
  for (const auto& conv : convs) {
    std::string name = conv.contains("name") ? conv["name"].get<std::string>() : "#" + std::to_string(k);
    SCOPED_TRACE(path + " conversation " + name);
    std::string rendered;
    ASSERT_NO_THROW(rendered = tpl.render(input_of(conv)));
    EXPECT_TRUE(test::same_bytes(rendered, conv.at("rendered").get<std::string>()));
    ++k;
  }
}

TEST(ChatTemplateGolden, ReleasedGoldens) {
  check_conversations("tests/fixtures/minimax-m3/goldens.json");
}

TEST(ChatTemplateGolden, ExtraGoldens) {
  const std::string path = "tests/fixtures/chat_template/extra_goldens.json";
  if (!test::file_exists(path))
    GTEST_SKIP() << path << " not generated yet (tools/goldens/make_template_goldens.py REPO_ROOT OUT_JSON)";
  check_conversations(path);
}

TEST(ChatTemplateGolden, TemplateIsTheReleasedOne) {
  std::string src = test::read_file(kTemplatePath);
  EXPECT_EQ(src.size(), 11756u);
  EXPECT_EQ(src.rfind("{# ---------- special token variables ---------- #}", 0), 0u);
}

TEST(ChatTemplateGolden, ContentFormatIsOpenAI) {
  // vLLM detects the `for tr in message.content` loop of the tool branch.
  EXPECT_EQ(ChatTemplate::from_file(kTemplatePath).content_format(), ContentFormat::kOpenAI);
}

TEST(ChatTemplateGolden, ToolRoleWithoutCallRaises) {
  ChatTemplate tpl = ChatTemplate::from_file(kTemplatePath);
  ChatRenderInput in;
  in.messages =
      nlohmann::ordered_json::parse(R"([{"role":"user","content":"q"},{"role":"tool","content":"r"}])");
  try {
    tpl.render(in);
    FAIL() << "expected raise_exception";
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "Message has tool role, but there was no previous assistant message with a tool call!");
  }
}

TEST(ChatTemplateGolden, ThinkingModePrefixes) {
  ChatTemplate tpl = ChatTemplate::from_file(kTemplatePath);
  ChatRenderInput in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"q"}])");
  auto render_mode = [&](const char* mode) {
    in.kwargs = mode ? nlohmann::ordered_json{{"thinking_mode", mode}} : nlohmann::ordered_json();
    return tpl.render(in);
  };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  EXPECT_TRUE(ends_with(render_mode("enabled"), "]~b]ai\n<mm:think>"));
  EXPECT_TRUE(ends_with(render_mode("disabled"), "]~b]ai\n</mm:think>"));
  EXPECT_TRUE(ends_with(render_mode("adaptive"), "]~b]ai\n"));
  EXPECT_TRUE(ends_with(render_mode(nullptr), "]~b]ai\n"));
  std::string other = render_mode("sometimes");
  EXPECT_TRUE(ends_with(other, "]~b]ai\n"));
  EXPECT_EQ(other.find("Current thinking mode:"), std::string::npos);
}

TEST(JinjaCases, MatchJinja2InHfConfiguration) {
  const std::string path = "tests/fixtures/chat_template/jinja_cases.json";
  nlohmann::ordered_json doc = test::read_json(path);
  size_t n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE("case " + name + ": " + c.at("template").get<std::string>());
    try {
      jinja::Template tpl(c.at("template").get<std::string>());
      std::string out = tpl.render(c.at("context"));
      if (c.contains("error")) {
        ADD_FAILURE() << "rendered " << out << " but jinja2 raised " << c["error"];
      } else {
        EXPECT_TRUE(test::same_bytes(out, c.at("expected").get<std::string>()));
      }
    } catch (const m3::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_TRUE(c.contains("error")) << "unexpected error: " << e.what();
    }
    ++n;
  }
  EXPECT_GE(n, 150u);
}

}  // namespace
}  // namespace m3::chat
