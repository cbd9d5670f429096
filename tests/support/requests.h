// Test support: engine requests used across tests.
#pragma once

#include <utility>
#include <vector>

#include "engine/engine.h"

namespace m3::testing {

// Greedy, EOS ignored: the output length is exactly max_tokens.
inline Request greedy(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace m3::testing
