// Test support: N ranks as N threads of one process, over a communicator on shared memory. Lets unit tests
// run the rank protocol and a sharded model at TP N without a launcher, and check what every rank computed.
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace m3::testing {

class ThreadRanks {
 public:
  explicit ThreadRanks(int n) : n_(n), barrier_(n), slots_(n) {}

  // Runs body(comm) on each of the N ranks, each in its own thread; rethrows the first rank's exception.
  void run(const std::function<void(std::shared_ptr<dist::Communicator>)>& body) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(n_);
    for (int r = 0; r < n_; ++r)
      threads.emplace_back([&, r] {
        try {
          body(std::make_shared<Comm>(this, r));
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  class Comm final : public dist::Communicator {
   public:
    Comm(ThreadRanks* g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_->n_; }
    void broadcast(void* data, size_t bytes, int root, bool) override {
      if (rank_ == root) g_->slots_[root] = data;
      g_->barrier_.arrive_and_wait();
      if (rank_ != root) std::memcpy(data, g_->slots_[root], bytes);
      g_->barrier_.arrive_and_wait();
    }
    void all_gather(const void* send, size_t bytes, void* recv) override {
      g_->slots_[rank_] = send;
      g_->barrier_.arrive_and_wait();
      for (int r = 0; r < g_->n_; ++r)
        std::memcpy(static_cast<char*>(recv) + r * bytes, g_->slots_[r], bytes);
      g_->barrier_.arrive_and_wait();
    }
    [[noreturn]] void abort(const std::string& why) override { throw std::runtime_error("abort: " + why); }

   private:
    ThreadRanks* g_;
    int rank_;
  };

  int n_;
  std::barrier<> barrier_;
  std::vector<const void*> slots_;
};

}  // namespace m3::testing
