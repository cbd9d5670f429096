// Chat messages -> prompt: OpenAI-shaped messages and tools are normalised the way vLLM does, rendered
// through the model's chat template, and tokenized. Shared by /v1/chat/completions, /v1/messages and
// /tokenize.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "server/api_server.h"

namespace m3 {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> ids;
  ThinkingStart thinking = ThinkingStart::kAdaptive;  // where generation starts, from the prompt's end
  nlohmann::ordered_json tools;                       // normalised tools (null when none)
};

// Throws ApiException(400) naming the problem (bad message shape, template error). Image/video/audio parts
// are rejected (no vision path yet) unless `allow_media`, which tokenization uses to render their
// placeholders.
ChatPrompt render_chat_prompt(const ServingContext& ctx, const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& tools, bool add_generation_prompt,
                              const nlohmann::ordered_json& kwargs, bool allow_media = false);

}  // namespace m3
