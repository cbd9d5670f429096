// Event loop of one API request.
#include "server/generation_run.h"

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
  for (Seq& s : seqs_)
    if (!s.done) engine_.abort(s.stream->id());
}

bool GenerationRun::run(const std::function<bool()>& alive,
                        const std::function<void(int, OutputDelta&)>& on_delta) {
  size_t remaining = seqs_.size();
  const auto poll = seqs_.size() == 1 ? milliseconds(50) : milliseconds(2);
  auto last_check = steady_clock::now();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < seqs_.size(); ++i) {
      Seq& s = seqs_[i];
      if (s.done) continue;
      TokenEvent ev;
      if (!s.stream->next(&ev, poll)) continue;
      progressed = true;
      if (ev.token >= 0) {
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
        --remaining;
        server_.metrics().request_finished(d.finish_reason, prompt_tokens_, s.proc->num_tokens(),
                                           duration<double>(steady_clock::now() - start_).count());
      }
      on_delta(static_cast<int>(i), d);
    }
    // A client that left is noticed within ~50 ms even while nothing is generated (queued, long prefill).
    if (!progressed || steady_clock::now() - last_check > milliseconds(50)) {
      last_check = steady_clock::now();
      if (!alive()) {
        for (Seq& s : seqs_)
          if (!s.done) {
            engine_.abort(s.stream->id());
            s.done = true;
          }
        server_.metrics().request_aborted("client_disconnect");
        log_info("client disconnected: aborted request");
        return false;
      }
    }
  }
  return true;
}

Usage GenerationRun::usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens_;
  for (const Seq& s : seqs_) {
    u.completion_tokens += s.proc->num_tokens();
    u.reasoning_tokens += s.proc->reasoning_tokens();
  }
  return u;
}

}  // namespace m3
