// The load generator's concurrency limit, event-driven: requests go out through one RequestClient as they are
// submitted while fewer than max_in_flight are outstanding (--max-concurrency; unbounded when unset, as
// vLLM); the rest wait in submission order and start as others finish. That wait is their client queue time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "bench/request_client.h"

namespace m3::bench {

class RequestRunner {
 public:
  // Called once per request, on the client's I/O threads (possibly two at a time): it must not block.
  using Done = std::function<void(size_t index, RequestOutput&&)>;
  RequestRunner(const RequestClient& client, size_t max_in_flight, Done done);
  ~RequestRunner();  // waits for every submitted request
  RequestRunner(const RequestRunner&) = delete;
  RequestRunner& operator=(const RequestRunner&) = delete;

  // Thread-safe. `arrival` is when the request became due, in seconds on the client's clock; `req` must
  // outlive the wait for a slot.
  void submit(size_t index, const SampleRequest& req, std::string request_id, double arrival);
  // Blocks until every submitted request is done.
  void wait();

 private:
  struct Job {
    size_t index;
    const SampleRequest* req;
    std::string request_id;
    double arrival;
  };
  void launch(Job job);
  void finished();

  const RequestClient& client_;
  const size_t max_in_flight_;
  const Done done_;
  std::mutex mu_;
  std::condition_variable all_done_;
  std::deque<Job> waiting_;
  size_t in_flight_ = 0;
  size_t unfinished_ = 0;  // submitted and not yet done: waiting_ + in flight
};

}  // namespace m3::bench
