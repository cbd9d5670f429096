// Validation of message roles happens here, before the template sees them, so errors name the message index.
#include "server/chat_prompt.h"

#include <set>

#include "common/error.h"

namespace m3 {

ChatPrompt render_chat_prompt(const ServingContext& ctx, const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& tools, bool add_generation_prompt,
                              const nlohmann::ordered_json& kwargs) {
  if (!messages.is_array()) reject("'messages' must be a list", "messages");
  if (messages.empty()) reject("'messages' must not be empty", "messages");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) reject(where + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) reject(where + ".role is missing", "messages");
    if (!roles.count(m["role"].get<std::string>()))
      reject(where + ".role '" + m["role"].get<std::string>() +
                 "' is not one of system, developer, user, assistant, tool",
             "messages");
  }
  if (!kwargs.is_null() && !kwargs.is_object())
    reject("'chat_template_kwargs' must be an object", "chat_template_kwargs");

  ChatPrompt p;
  chat::ChatRenderInput in;
  try {
    in.messages = chat::normalize_messages(messages, ctx.chat_template.content_format());
    if (!tools.is_null()) {
      if (!tools.is_array()) reject("'tools' must be a list", "tools");
      p.tools = chat::normalize_tools(tools);
      in.tools = p.tools;
    }
    in.add_generation_prompt = add_generation_prompt;
    in.kwargs = kwargs;
    in.bos_token = ctx.bos_token;
    in.eos_token = ctx.eos_token;
    p.text = ctx.chat_template.render(in);
  } catch (const Error& e) {
    reject(std::string("chat template: ") + e.what(), "messages");
  }
  p.ids = ctx.tokenizer.encode(p.text, /*parse_special=*/true);
  p.thinking = infer_thinking_start(p.text);
  return p;
}

}  // namespace m3
