// Fuzz target for the chat-template engine (user-supplied --chat-template files go through it). Input: a
// template source, optionally followed by "\n----context----\n" and JSON: an object of template variables, or
// an array of messages. Every failure must surface as m3::Error; crashes, hangs and runaway memory are bugs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/template/jinja.h"
#include "chat/template/message_mapping.h"

namespace {

constexpr std::string_view kSeparator = "\n----context----\n";

// Bracket depth of JSON text, so that deeply nested documents are not handed to nlohmann's recursive
// copy/dump.
int json_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

nlohmann::ordered_json default_context() {
  return nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
                 {"role": "assistant", "content": "<mm:think>r</mm:think>ok", "tool_calls": [
                   {"type": "function", "function": {"name": "f", "arguments": {"a": [1, {"b": null}], "c": true}}}]},
                 {"role": "tool", "content": [{"type": "text", "text": "r"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "thinking_mode": "enabled"})");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view source = input;
  nlohmann::ordered_json context = default_context();
  size_t sep = input.find(kSeparator);
  if (sep != std::string_view::npos) {
    source = input.substr(0, sep);
    std::string_view extra = input.substr(sep + kSeparator.size());
    if (json_depth(extra) <= 64) {
      auto parsed = nlohmann::ordered_json::parse(extra, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) {
        for (auto it = parsed.begin(); it != parsed.end(); ++it) context[it.key()] = it.value();
      } else if (parsed.is_array()) {
        context["messages"] = parsed;
      }
    }
  }

  m3::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_alloc_bytes = 64 << 20;
  limits.max_steps = 200000;
  limits.max_call_depth = 64;
  try {
    m3::jinja::Template tpl(source);
    m3::chat::ContentFormat format = m3::chat::detect_content_format(tpl.body());
    try {
      context["messages"] = m3::chat::normalize_messages(context["messages"], format);
    } catch (const m3::Error&) {
    }
    tpl.render(context, limits);
  } catch (const m3::Error&) {
  }
  return 0;
}
