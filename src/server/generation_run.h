// Runs the n sequences of one API request on the AsyncEngine: submits them (admission errors become
// 4xx/429/503 before any byte of the response is written), then, event-driven, passes each engine event
// through its OutputProcessor on the server's worker threads and hands the deltas to the endpoint's writer.
// No thread waits on a request: the engine announces events, a worker drains them (one drain per run at a
// time, so deltas arrive in order). cancel() (the client left) aborts every sequence, which frees their KV
// pages within one engine step. Records the request's metrics (TTFT, inter-token latency, end-to-end, tokens,
// finish reason).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
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
  int cached_tokens = 0;         // prompt tokens served from the prefix cache
  int cache_written_tokens = 0;  // prompt tokens written to the cache and kept at the client's request
};

class GenerationRun : public std::enable_shared_from_this<GenerationRun> {
 public:
  using DeltaFn = std::function<void(int choice, OutputDelta& delta)>;
  using DoneFn = std::function<void(bool finished)>;

  GenerationRun(ApiServer& server, GenerationSpec spec);  // submits; throws ApiException on admission failure
  ~GenerationRun();                                       // aborts whatever is still running

  // Delivers every delta through on_delta (on a worker thread, one call at a time, in order), then calls
  // on_done(true) once every choice has finished, or on_done(false) once after cancel().
  void start(DeltaFn on_delta, DoneFn on_done);
  void cancel();  // the client went away: abort the sequences; thread-safe, idempotent
  Usage usage() const;
  int n() const { return static_cast<int>(seqs_.size()); }

 private:
  struct Seq {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<OutputProcessor> proc;
    bool done = false;
    int cached_tokens = 0, cache_written_tokens = 0;
  };
  void schedule();  // a drain on a worker, unless one is pending (then it runs again)
  void drain();
  bool pump();  // handles every queued event; true when all choices finished
  void finish(bool finished);

  ApiServer& server_;
  AsyncEngine& engine_;
  int prompt_tokens_ = 0;
  std::vector<Seq> seqs_;
  std::chrono::steady_clock::time_point start_, last_token_;
  bool first_token_seen_ = false;

  std::mutex mu_;  // guards the fields below
  bool draining_ = false, again_ = false, cancelled_ = false, ended_ = false;
  DeltaFn on_delta_;
  DoneFn on_done_;
};

}  // namespace m3
