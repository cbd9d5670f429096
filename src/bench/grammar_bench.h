// `m3 bench grammar`: what structured output costs on the host, at the real vocabulary. For each grammar (any
// JSON object, each --schema, and the tool-call markup of each --tools list): the compile time, then random
// walks through allowed tokens (B rows in lockstep, restarting a row when its structure completes) timing the
// mask of every token (p50 / p99) and the host time a whole batch's masks take per step with the engine's
// threading, the number that must stay under a decode step's GPU time.
#pragma once

#include <string>
#include <vector>

namespace m3::bench {

struct GrammarBenchOptions {
  std::string tokenizer;                     // tokenizer.json (or its directory)
  std::vector<int32_t> stop_ids = {200020};  // EOS ids
  std::vector<std::string> schemas;          // files holding one JSON schema each
  // Files with tools: a list of tools (Anthropic {name, input_schema} or OpenAI {type, function}), a request
  // body with "tools", or a recorded session ({"requests": [{"body": {"tools": ...}}]}).
  std::vector<std::string> tools;
  std::vector<int> batch_sizes = {1, 64};
  int steps = 128;  // tokens per row per walk
  uint32_t seed = 0;
  std::string result_json;  // write the results here too
};

// Prints the table; returns 0, or throws m3::Error naming the bad file.
int run_grammar_benchmark(const GrammarBenchOptions& options);

}  // namespace m3::bench
