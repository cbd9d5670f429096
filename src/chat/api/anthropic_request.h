// Anthropic Messages request -> the OpenAI-shaped messages, tools and template kwargs the chat template is
// rendered from (as vLLM maps them). System text, whether in `system` or in `role: "system"` entries inside
// `messages` (Claude Code sends both), is placed so that a conversation that grows turn by turn renders to a
// prompt that extends the previous turn's: the top-level system prompt stays first, an inline system entry is
// folded into the user turn (or last tool result) before it, else into the next one. Per-request volatile
// blocks (Claude Code's `x-anthropic-billing-header`) are dropped so they cannot break prefix reuse.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace m3 {

struct AnthropicChat {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // OpenAI-shaped, null when none (or narrowed to the one tool_choice names)
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs + thinking_mode
  // The longest cache_control ttl of the request, in seconds (5m: 300, 1h: 3600); 0 when nothing is marked.
  double cache_ttl_seconds = 0;
  std::string tool_choice = "auto";    // auto | any | tool | none
  std::optional<int> thinking_budget;  // thinking.budget_tokens when thinking is enabled
};

// Throws m3::Error(kInvalidArgument) naming the field (`messages[3].content[1]: ...`).
AnthropicChat convert_anthropic_request(const nlohmann::ordered_json& body);

}  // namespace m3
