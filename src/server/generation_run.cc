// Event delivery of one API request: engine thread -> listener -> a drain on a worker thread.
#include "server/generation_run.h"

#include <algorithm>

#include "common/log.h"

namespace m3 {

using namespace std::chrono;

GenerationRun::GenerationRun(ApiServer& server, GenerationSpec spec)
    : server_(server), engine_(*server.context().engine), start_(steady_clock::now()) {
  prompt_tokens_ = static_cast<int>(spec.request.prompt.size());
  ServingContext& ctx = server.context();
  try {
    for (int i = 0; i < spec.n; ++i) {
      Request r = spec.request;
      if (r.seed) r.seed = *r.seed + static_cast<uint64_t>(i);
      Seq s;
      s.stream = engine_.submit(std::move(r));
      s.proc = std::make_unique<OutputProcessor>(ctx.tokenizer, spec.text);
      seqs_.push_back(std::move(s));
    }
  } catch (const Error& e) {
    for (Seq& s : seqs_) engine_.abort(s.stream->id());
    throw ApiException{api_error_from(e)};
  }
}

GenerationRun::~GenerationRun() {
  for (Seq& s : seqs_) {
    s.stream->set_listener(nullptr);
    if (!s.done) engine_.abort(s.stream->id());
  }
}

void GenerationRun::start(DeltaFn on_delta, DoneFn on_done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_delta_ = std::move(on_delta);
    on_done_ = std::move(on_done);
  }
  // The listener holds the run weakly: the stream (owned by the engine) must not keep the run alive.
  std::weak_ptr<GenerationRun> weak = weak_from_this();
  for (Seq& s : seqs_)
    s.stream->set_listener([weak] {
      if (auto self = weak.lock()) self->schedule();
    });
  schedule();  // events queued before the listeners were set
}

void GenerationRun::schedule() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    if (draining_) {
      again_ = true;
      return;
    }
    draining_ = true;
  }
  server_.workers().post([self = shared_from_this()] { self->drain(); });
}

void GenerationRun::drain() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      again_ = false;
      if (cancelled_) {
        draining_ = false;
        on_delta_ = nullptr;  // cancel() left it to this drain
        return;
      }
    }
    if (pump()) {
      finish(true);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!again_ && !cancelled_) {  // a cancellation is handled at the top of the loop
      draining_ = false;
      return;
    }
  }
}

bool GenerationRun::pump() {
  size_t remaining = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    Seq& s = seqs_[i];
    TokenEvent ev;
    while (!s.done && s.stream->next(&ev, milliseconds(0))) {
      if (ev.token >= 0) {
        s.cached_tokens = ev.cached_tokens;
        s.cache_written_tokens = ev.cache_written_tokens;
        const auto now = steady_clock::now();
        if (!first_token_seen_)
          server_.metrics().first_token(duration<double>(now - start_).count());
        else
          server_.metrics().inter_token(duration<double>(now - last_token_).count());
        first_token_seen_ = true;
        last_token_ = now;
      }
      OutputDelta d = s.proc->on_event(ev);
      if (s.proc->stop_string_hit()) engine_.abort(s.stream->id());  // its abort event is never read
      if (d.finished) {
        s.done = true;
        server_.metrics().request_finished(d.finish_reason, prompt_tokens_, s.proc->num_tokens(),
                                           duration<double>(steady_clock::now() - start_).count());
      }
      on_delta_(static_cast<int>(i), d);
    }
    remaining += s.done ? 0 : 1;
  }
  return remaining == 0;
}

void GenerationRun::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || cancelled_) return;
    cancelled_ = true;
    if (!draining_) on_delta_ = nullptr;  // else the running drain drops it when it sees the flag
  }
  for (Seq& s : seqs_) engine_.abort(s.stream->id());
  server_.metrics().request_aborted("client_disconnect");
  log_info("client disconnected: aborted request");
  finish(false);
}

void GenerationRun::finish(bool finished) {
  DoneFn done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    done = std::move(on_done_);
    on_done_ = nullptr;
  }
  if (done) done(finished);
  // The delta writer may hold this run (usage in the final chunk): drop it once nothing can call it.
  if (finished) {
    std::lock_guard<std::mutex> lock(mu_);
    on_delta_ = nullptr;
  }
}

Usage GenerationRun::usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens_;
  for (const Seq& s : seqs_) {
    u.completion_tokens += s.proc->num_tokens();
    u.reasoning_tokens += s.proc->reasoning_tokens();
    u.cached_tokens = std::max(u.cached_tokens, s.cached_tokens);  // the choices share one prompt
    u.cache_written_tokens = std::max(u.cache_written_tokens, s.cache_written_tokens);
  }
  return u;
}

}  // namespace m3
