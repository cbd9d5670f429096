// Thread-safe front of the Engine for the server. One background thread owns the Engine and runs the step
// loop; callers submit requests from any thread and read that request's events from its RequestStream.
// abort() (a client disconnect, a matched stop string) takes effect at the next step boundary, so the
// request's KV pages are freed within one step. The loop sleeps when there is no work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine.h"

namespace m3 {

class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }
  // Blocks until an event arrives (true) or `timeout` passes (false). After the finishing event, returns
  // false. A zero timeout polls.
  bool next(TokenEvent* event, std::chrono::milliseconds timeout);
  // For event-driven readers: `fn` runs on the engine thread after each event is queued (it must only
  // schedule work, never block). Events queued before it was set are not announced: read them after setting.
  void set_listener(std::function<void()> fn);

 private:
  friend class AsyncEngine;
  void push(TokenEvent event);

  std::function<void()> listener_;  // guarded by mu_ when set; called outside it

  const int64_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;  // the finishing event was consumed
};

struct AsyncEngineOptions {
  size_t max_pending =
      4096;  // requests submitted but not finished; beyond it submit() throws kResourceExhausted
};

class AsyncEngine {
 public:
  AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options = {});
  ~AsyncEngine();

  const ModelConfig& config() const { return config_; }
  int64_t max_model_len() const { return max_model_len_; }

  // Validates on the caller's thread (throws m3::Error naming the field), then queues.
  // Throws kResourceExhausted when max_pending requests are in flight, kUnavailable once draining.
  std::shared_ptr<RequestStream> submit(Request request);
  void abort(int64_t id);
  EngineStats stats() const;
  size_t in_flight() const;
  void begin_drain();  // refuse new requests; in-flight ones continue
  // Drops the prefix cache's pages that no request holds, at the next step boundary (POST
  // /reset_prefix_cache).
  void reset_prefix_cache();
  void stop();  // aborts everything still running and joins the loop thread

 private:
  void loop();

  std::unique_ptr<Engine> engine_;
  const ModelConfig config_;
  const int64_t max_model_len_;
  AsyncEngineOptions opt_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> incoming_;
  std::vector<int64_t> aborts_;
  bool reset_prefix_cache_ = false;
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;  // by public id, until finished
  std::map<int64_t, int64_t> engine_ids_;                      // public id -> engine id, once added
  std::map<int64_t, int64_t> public_ids_;                      // engine id -> public id
  EngineStats stats_;
  int64_t next_id_ = 0;
  bool draining_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace m3
