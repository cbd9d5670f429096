// A chat template (chat_template.jinja or a --chat-template file) rendered exactly as HF's
// apply_chat_template does. Invariants: render() is const and thread-safe; syntax errors surface at load,
// render errors (including raise_exception) at render, both as m3::Error(kInvalidArgument). Messages are
// passed through unchanged: map OpenAI request messages with normalize_messages() (message_mapping.h) first.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "chat/template/jinja.h"
#include "chat/template/message_mapping.h"

namespace m3::chat {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null if none
  bool add_generation_prompt = true;
  nlohmann::ordered_json
      kwargs;  // chat_template_kwargs (thinking_mode, model_identity, ...): null or an object
  std::string bos_token, eos_token;  // the tokenizer's special tokens; an empty one is left undefined
};

class ChatTemplate {
 public:
  static ChatTemplate from_file(const std::string& path);  // kNotFound if unreadable
  static ChatTemplate from_string(std::string source);

  // Variables: messages, tools, documents (none), add_generation_prompt, bos_token, eos_token, then every key
  // of `kwargs` (which may override the special tokens but not the first four, as in apply_chat_template).
  std::string render(const ChatRenderInput& input) const;

  // How vLLM (--chat-template-content-format auto) would pass message content to this template.
  ContentFormat content_format() const { return content_format_; }
  const std::string& source() const { return source_; }
  void set_limits(const jinja::RenderLimits& limits) { limits_ = limits; }

 private:
  ChatTemplate(std::string source, std::string origin);

  std::string source_;
  std::string origin_;
  jinja::Template template_;
  ContentFormat content_format_;
  jinja::RenderLimits limits_;
};

}  // namespace m3::chat
