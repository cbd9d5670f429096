// The loop: take new requests and aborts under the lock, run one engine step outside it, deliver events.
#include "engine/async_engine.h"

#include "common/error.h"
#include "common/log.h"

namespace m3 {

bool RequestStream::next(TokenEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_) return false;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  if (event->finish != FinishReason::kNone) finished_ = true;
  return true;
}

void RequestStream::push(TokenEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    listener = listener_;
  }
  cv_.notify_one();
  if (listener) listener();
}

void RequestStream::set_listener(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(fn);
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine, AsyncEngineOptions options)
    : engine_(std::move(engine)),
      config_(engine_->config()),
      max_model_len_(engine_->max_model_len()),
      opt_(options),
      stats_(engine_->stats()) {
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  stop();
}

std::shared_ptr<RequestStream> AsyncEngine::submit(Request request) {
  engine_->validate(request);      // reads only immutable engine state
  engine_->encode_media(request);  // images: the vision tower runs here, not in the step loop
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stopping_) fail(ErrorKind::kUnavailable, "the server is shutting down");
  if (streams_.size() >= opt_.max_pending)
    fail(ErrorKind::kResourceExhausted,
         "too many requests in flight (" + std::to_string(opt_.max_pending) + ")");
  auto stream = std::make_shared<RequestStream>(next_id_++);
  streams_[stream->id()] = stream;
  incoming_.emplace_back(std::move(request), stream);
  wake_.notify_one();
  return stream;
}

void AsyncEngine::abort(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  wake_.notify_one();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t AsyncEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

void AsyncEngine::begin_drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

void AsyncEngine::reset_prefix_cache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reset_prefix_cache_ = true;
  }
  wake_.notify_one();
}

void AsyncEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    for (const auto& [id, s] : streams_) aborts_.push_back(id);
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

// Events are delivered with mu_ released: a stream's listener may drop the last reference to its consumer,
// whose destructor calls abort(), which takes mu_ (a disconnect racing the final token deadlocked here).
void AsyncEngine::loop() {
  std::vector<std::pair<std::shared_ptr<RequestStream>, TokenEvent>> deliveries;
  auto deliver = [&] {
    for (auto& [stream, ev] : deliveries) stream->push(std::move(ev));
    deliveries.clear();
  };
  for (;;) {
    std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> incoming;
    std::vector<int64_t> aborts;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return stopping_ || reset_prefix_cache_ || !incoming_.empty() || !aborts_.empty() ||
               engine_->has_work();
      });
      if (reset_prefix_cache_) {
        log_info("prefix cache reset: ", engine_->reset_prefix_cache(), " cached KV pages dropped");
        reset_prefix_cache_ = false;
      }
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      for (auto& [request, stream] : incoming) {
        try {
          const int64_t engine_id = engine_->add(std::move(request));
          engine_ids_[stream->id()] = engine_id;
          public_ids_[engine_id] = stream->id();
        } catch (const Error& e) {  // validated on submit; only an engine-side failure lands here
          log_error("request ", stream->id(), " rejected by the engine: ", e.what());
          aborts.push_back(stream->id());
        }
      }
      for (int64_t id : aborts) {
        auto s = streams_.find(id);
        if (s == streams_.end()) continue;
        auto e = engine_ids_.find(id);
        if (e != engine_ids_.end()) {
          engine_->abort(e->second);
          public_ids_.erase(e->second);
          engine_ids_.erase(e);
        }
        TokenEvent ev;
        ev.request_id = id;
        ev.finish = FinishReason::kAbort;
        deliveries.emplace_back(s->second, std::move(ev));
        streams_.erase(s);
      }
      done = stopping_ && streams_.empty();
      stats_ = engine_->stats();  // aborts free pages without a step: publish that too
    }
    deliver();
    if (done) return;
    if (!engine_->has_work()) continue;

    std::vector<TokenEvent> events = engine_->step();  // outside the lock: submitters never wait for a step

    {
      std::lock_guard<std::mutex> lock(mu_);
      for (TokenEvent& ev : events) {
        const int64_t eng = ev.request_id, pub = public_ids_.at(eng);
        ev.request_id = pub;
        const bool last = ev.finish != FinishReason::kNone;
        deliveries.emplace_back(streams_.at(pub), std::move(ev));
        if (last) {
          streams_.erase(pub);
          engine_ids_.erase(pub);
          public_ids_.erase(eng);
        }
      }
      stats_ = engine_->stats();
    }
    deliver();
  }
}

}  // namespace m3
