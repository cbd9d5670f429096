// Runs the n sequences of one API request on the AsyncEngine: submits them (admission errors become
// 4xx/429/503 before any byte of the response is written), then waits for their events, passes each through
// its OutputProcessor and hands the deltas to the endpoint's writer. Between events it checks that the client
// is still there; a disconnect aborts every sequence, which frees their KV pages within one engine step.
// Records the request's metrics (TTFT, inter-token latency, end-to-end, tokens, finish reason).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "server/api_server.h"
#include "server/output_processor.h"

namespace m3 {

struct GenerationSpec {
  Request request;  // prompt, limits and sampling; request.seed is offset by the choice index for n > 1
  TextOptions text;
  int n = 1;
};

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, reasoning_tokens = 0;
};

class GenerationRun {
 public:
  GenerationRun(ApiServer& server, GenerationSpec spec);  // submits; throws ApiException on admission failure
  ~GenerationRun();                                       // aborts whatever is still running

  // Delivers every delta as on_delta(choice, delta) until all choices finish (true) or `alive` turns false
  // (false: the client went away and the sequences were aborted).
  bool run(const std::function<bool()>& alive, const std::function<void(int, OutputDelta&)>& on_delta);
  Usage usage() const;
  int n() const { return static_cast<int>(seqs_.size()); }

 private:
  struct Seq {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<OutputProcessor> proc;
    bool done = false;
  };
  ApiServer& server_;
  AsyncEngine& engine_;
  int prompt_tokens_ = 0;
  std::vector<Seq> seqs_;
  std::chrono::steady_clock::time_point start_, last_token_;
  bool first_token_seen_ = false;
};

}  // namespace m3
