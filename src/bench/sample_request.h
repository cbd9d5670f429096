// One benchmark request as every dataset draws it: the prompt text, its token count under the benchmark
// tokenizer, and max_tokens. A multi-turn request (the agent workload) also carries its chat history, which
// chat backends send instead of `prompt` as one user message.
#pragma once

#include <string>
#include <vector>

namespace m3::bench {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct SampleRequest {
  std::string prompt;           // the text sent to the server (completions; chat's one user message)
  int prompt_len = 0;           // tokens of `prompt` under the benchmark tokenizer
  int expected_output_len = 0;  // max_tokens / max_completion_tokens
  std::vector<ChatMessage> messages = {};  // chat backends send these when non-empty
};

}  // namespace m3::bench
