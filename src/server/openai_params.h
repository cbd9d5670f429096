// The sampling and limit fields shared by OpenAI chat and completions requests (and vLLM's extensions):
// each is type- and range-checked with a 400 naming the field, then mapped onto the engine Request and the
// text options. max_tokens defaults to the rest of the context; prompt + max_tokens beyond it is a 400.
#pragma once

#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/generation_run.h"

namespace m3 {

struct StreamOptions {
  bool stream = false;
  bool include_usage = false;
};

// temperature, top_p and top_k (range-checked), the sampling fields every endpoint shares.
void parse_basic_sampling(const nlohmann::ordered_json& body, SamplingParams& sampling);

// Fills spec.request (everything but the prompt, which must already be set) and spec.text.stop etc.
// `chat` selects the chat spelling of logprobs (logprobs: bool + top_logprobs) over completions' (logprobs:
// int).
void parse_openai_sampling(const nlohmann::ordered_json& body, const ApiServer& server, bool chat,
                           GenerationSpec& spec, StreamOptions& stream);

// The template variables of a chat request: `chat_template_kwargs`, plus `reasoning_effort` as a variable (as
// vLLM passes it); "none" also selects thinking_mode "disabled" unless the kwargs set a mode.
nlohmann::ordered_json chat_template_kwargs(const nlohmann::ordered_json& body);

// The engine's reasoning cap for a prompt whose generation starts at `start` (Anthropic
// thinking.budget_tokens, vLLM thinking_token_budget). Throws kInvalidArgument when the tokenizer has no
// reasoning markers.
ThinkingBudget thinking_budget(const Tokenizer& tok, int budget, ThinkingStart start);

// Converts engine logprobs to the OpenAI chat shape {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                  const std::vector<TokenLogprobs>& lps, int top_n);

}  // namespace m3
