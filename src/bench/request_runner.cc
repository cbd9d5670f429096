// A finished request hands its slot straight to the oldest waiting one, on the I/O thread that finished it,
// so a full pipeline never waits for the submitting thread. Nothing here blocks but wait().
#include "bench/request_runner.h"

#include <optional>

namespace m3::bench {

RequestRunner::RequestRunner(const RequestClient& client, size_t max_in_flight, Done done)
    : client_(client), max_in_flight_(max_in_flight), done_(std::move(done)) {}

RequestRunner::~RequestRunner() {
  wait();
}

void RequestRunner::submit(size_t index, const SampleRequest& req, std::string request_id, double arrival) {
  Job job{index, &req, std::move(request_id), arrival};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++unfinished_;
    if (in_flight_ >= max_in_flight_) {
      waiting_.push_back(std::move(job));
      return;
    }
    ++in_flight_;
  }
  launch(std::move(job));
}

void RequestRunner::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  all_done_.wait(lock, [this] { return unfinished_ == 0; });
}

void RequestRunner::launch(Job job) {
  client_.start(*job.req, job.request_id,
                [this, index = job.index, arrival = job.arrival](RequestOutput&& out) {
                  out.client_queue_time = out.start_time - arrival;
                  done_(index, std::move(out));
                  finished();
                });
}

void RequestRunner::finished() {
  std::optional<Job> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!waiting_.empty()) {
      next = std::move(waiting_.front());
      waiting_.pop_front();
    } else {
      --in_flight_;
    }
    // Last touch of *this when it reaches 0: wait() may return and the runner go once the lock is released.
    if (--unfinished_ == 0) all_done_.notify_all();
  }
  if (next) launch(std::move(*next));
}

}  // namespace m3::bench
