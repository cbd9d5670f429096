// The driver hands finished turns from the client's I/O threads to the calling thread through a small
// mutex-guarded list: building the next turn copies a long prompt (and may count tokens), which must not
// hold up the I/O threads that time every other stream. The calling thread alone builds and submits
// requests; an I/O thread alone writes a turn's output, before handing its index over under the lock.
#include "bench/agent_workload.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "bench/random_text.h"
#include "bench/request_runner.h"
#include "common/error.h"
#include "common/log.h"

namespace m3::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void bad_flag(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

void check(const AgentWorkloadOptions& o) {
  if (o.conversations < 1) bad_flag("--agent-conversations must be at least 1");
  if (o.turns < 1) bad_flag("--agent-turns must be at least 1");
  if (o.system_len < 0) bad_flag("--agent-system-len must not be negative");
  if (o.turn_len < 1) bad_flag("--agent-turn-len must be at least 1");
  if (o.output_len < 1) bad_flag("--agent-output-len must be at least 1");
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

AgentWorkload::AgentWorkload(const Tokenizer& tok, const AgentWorkloadOptions& opt) : tok_(tok), opt_(opt) {
  check(opt);
  const RandomText random(tok);
  Rng rng(mix_seed(opt.seed, 0));
  const FittedText system = random.draw("", {}, static_cast<size_t>(opt.system_len), rng);
  if (!system.exact)
    log_warn("the agent system prompt encodes to ", system.tokens, " tokens instead of ", opt.system_len);
  system_ = system.text;
  const std::vector<int32_t> system_ids = tok.encode(system_);
  system_tokens_ = static_cast<int>(system_ids.size());

  // A first turn's chunk is fitted after the system prompt, so turn 0 encodes to its exact length; later
  // chunks follow generated text nobody knows yet, so they are fitted on their own.
  const int n = static_cast<int>(num_requests());
  user_.resize(num_requests());
  user_tokens_.resize(num_requests());
  std::vector<char> exact(num_requests(), 0);
  parallel_for(n, [&](int i) {
    Rng own(mix_seed(opt.seed, static_cast<uint64_t>(i) + 1));
    const bool first = i % opt.turns == 0;
    const FittedText f = first ? random.draw(system_, system_ids, static_cast<size_t>(opt.turn_len), own)
                               : random.draw("", {}, static_cast<size_t>(opt.turn_len), own);
    user_[i] = f.text;
    user_tokens_[i] = static_cast<int>(f.tokens);
    exact[i] = f.exact;
  });
  const auto inexact = std::count(exact.begin(), exact.end(), 0);
  if (inexact > 0)
    log_warn(inexact, " of ", n, " agent user chunks do not encode to ", opt.turn_len, " tokens");
}

SampleRequest AgentWorkload::first_turn(int conversation) const {
  const size_t i = static_cast<size_t>(conversation) * opt_.turns;
  SampleRequest r{system_ + user_[i], system_tokens_ + user_tokens_[i], opt_.output_len};
  if (!system_.empty()) r.messages.push_back({"system", system_});
  r.messages.push_back({"user", user_[i]});
  return r;
}

SampleRequest AgentWorkload::next_turn(int conversation, int turn, const SampleRequest& prev,
                                       const RequestOutput& out) const {
  const size_t i = static_cast<size_t>(conversation) * opt_.turns + turn;
  const int generated =
      out.output_tokens > 0 ? out.output_tokens : static_cast<int>(tok_.encode(out.generated_text).size());
  SampleRequest r{prev.prompt + out.generated_text + user_[i], prev.prompt_len + generated + user_tokens_[i],
                  opt_.output_len, prev.messages};
  r.messages.push_back({"assistant", out.generated_text});
  r.messages.push_back({"user", user_[i]});
  return r;
}

std::vector<AgentTurn> AgentWorkload::run(const RequestClient& client, size_t max_in_flight,
                                          const std::vector<double>& starts, Clock::time_point epoch,
                                          const std::string& id_prefix,
                                          const std::function<void(const RequestOutput&)>& on_done) const {
  const int turns_per = opt_.turns;
  std::vector<AgentTurn> turns(num_requests());
  for (size_t i = 0; i < turns.size(); ++i) {
    turns[i].conversation = static_cast<int>(i / turns_per);
    turns[i].turn = static_cast<int>(i % turns_per);
  }
  std::mutex mu;
  std::condition_variable handed_over;
  std::vector<size_t> finished;  // indices whose output is written, not yet seen by this thread

  RequestRunner runner(client, max_in_flight, [&](size_t i, RequestOutput&& out) {
    on_done(out);
    {
      std::lock_guard<std::mutex> lock(mu);
      turns[i].output = std::move(out);
      finished.push_back(i);
    }
    handed_over.notify_one();  // this thread is alive until runner.wait() returns, after this callback
  });
  auto submit = [&](size_t i) {
    runner.submit(i, turns[i].request,
                  id_prefix + std::to_string(turns[i].conversation) + "-" + std::to_string(turns[i].turn),
                  seconds_since(epoch));
  };

  int started = 0;
  int open = opt_.conversations;  // conversations not yet over
  while (open > 0) {
    while (started < opt_.conversations && seconds_since(epoch) >= starts[static_cast<size_t>(started)]) {
      const size_t i = static_cast<size_t>(started) * turns_per;
      turns[i].request = first_turn(started++);
      submit(i);
    }
    std::vector<size_t> ready;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto any = [&] { return !finished.empty(); };
      if (started < opt_.conversations)
        handed_over.wait_until(
            lock,
            epoch + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(starts[static_cast<size_t>(started)])),
            any);
      else
        handed_over.wait(lock, any);
      ready.swap(finished);
    }
    for (const size_t i : ready) {
      const AgentTurn& done = turns[i];
      if (done.turn + 1 == turns_per) {
        --open;
      } else if (!done.output.success) {
        for (size_t j = i + 1; j < i + static_cast<size_t>(turns_per - done.turn); ++j) {
          turns[j].output.error = "not sent: turn " + std::to_string(done.turn) + " of conversation " +
                                  std::to_string(done.conversation) + " failed";
          on_done(turns[j].output);
        }
        --open;
      } else {
        turns[i + 1].request = next_turn(done.conversation, done.turn + 1, done.request, done.output);
        submit(i + 1);
      }
    }
  }
  runner.wait();
  return turns;
}

}  // namespace m3::bench
