// ChatTemplate (see chat_template.h): builds apply_chat_template's variable set and renders. Kept apart from
// the interpreter so that HF's conventions (special tokens, documents=None, reserved names) live in one
// place.
#include "chat/template/chat_template.h"

#include <fstream>
#include <sstream>

namespace m3::chat {

ChatTemplate::ChatTemplate(std::string source, std::string origin)
    : source_(std::move(source)),
      origin_(std::move(origin)),
      template_(source_),
      content_format_(detect_content_format(template_.body())) {}

ChatTemplate ChatTemplate::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "cannot read chat template file " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  try {
    return ChatTemplate(buf.str(), path);
  } catch (const jinja::TemplateError& e) {
    fail(ErrorKind::kInvalidArgument, path + ": " + e.what());
  }
}

ChatTemplate ChatTemplate::from_string(std::string source) {
  return ChatTemplate(std::move(source), "<string>");
}

std::string ChatTemplate::render(const ChatRenderInput& input) const {
  if (!input.messages.is_array()) fail(ErrorKind::kInvalidArgument, "chat messages must be a JSON array");
  if (!input.kwargs.is_null() && !input.kwargs.is_object())
    fail(ErrorKind::kInvalidArgument, "chat_template_kwargs must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (!input.bos_token.empty()) ctx["bos_token"] = input.bos_token;
  if (!input.eos_token.empty()) ctx["eos_token"] = input.eos_token;
  if (input.kwargs.is_object()) {
    for (auto it = input.kwargs.begin(); it != input.kwargs.end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt")
        fail(ErrorKind::kInvalidArgument, "chat_template_kwargs cannot set '" + key + "'");
      ctx[key] = it.value();
    }
  }
  ctx["messages"] = input.messages;
  ctx["tools"] = input.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = input.add_generation_prompt;
  return template_.render(ctx, limits_);
}

}  // namespace m3::chat
