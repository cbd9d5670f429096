// Chat messages -> prompt: OpenAI-shaped messages and tools are normalised the way vLLM does, rendered
// through the model's chat template, and tokenized. Shared by /v1/chat/completions, /v1/messages, /tokenize,
// `m3 generate` and `m3 tokenize`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "chat/template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> ids;
  ThinkingStart thinking = ThinkingStart::kAdaptive;  // where generation starts, from the prompt's end
  nlohmann::ordered_json tools;                       // normalised tools (null when none)
};

// What rendering needs of the loaded model.
struct PromptModel {
  const Tokenizer& tokenizer;
  const chat::ChatTemplate& chat_template;
  const std::string& bos_token;  // the strings the template sees
  const std::string& eos_token;
};

// Throws m3::Error(kInvalidArgument) naming the field and, for a conversation the template refuses, the first
// message it cannot render (the template's internals are logged, not returned). Image/video/audio parts are
// rejected (no vision path yet) unless `allow_media`, which tokenization uses to render their placeholders.
ChatPrompt render_chat_prompt(const PromptModel& model, const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& tools, bool add_generation_prompt,
                              const nlohmann::ordered_json& kwargs, bool allow_media = false);

}  // namespace m3
