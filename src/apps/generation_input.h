// Parsing of `m3 generate` input lines ({"prompt_token_ids": [...], "max_tokens", "temperature", ...}) into
// engine Requests, and of the sampling defaults a model ships in generation_config.json. Each error names
// the field; the caller adds the line number.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/api/chat_prompt.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct GenerationDefaults {
  SamplingParams sampling;  // temperature / top_p / top_k from generation_config.json when present
  std::optional<int>
      max_new_tokens;  // the default max_tokens (server and `m3 generate`, whose fallback is 16)
};

GenerationDefaults load_generation_defaults(const std::string& model_dir);

struct GenerationRequest {
  Request request;
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
};

// Parses one request object. `tok` (null when the model has no tokenizer) enables "prompt" text and "stop"
// strings; `chat` (null without a chat template) enables "messages" (+ "tools", "add_generation_prompt",
// "chat_template_kwargs"), rendered as the server renders them. Throws m3::Error(kInvalidArgument) naming the
// field.
GenerationRequest parse_generation_request(const nlohmann::ordered_json& line,
                                           const GenerationDefaults& defaults, const Tokenizer* tok,
                                           const PromptModel* chat);

}  // namespace m3
