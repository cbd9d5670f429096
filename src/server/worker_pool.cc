// One queue, N threads; exceptions inside a task are the task's business (logged here, never fatal).
#include "server/worker_pool.h"

#include <algorithm>

#include "common/log.h"

namespace m3 {

WorkerPool::WorkerPool(int threads) {
  const int n = threads > 0 ? threads : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void WorkerPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      log_error("worker task failed: ", e.what());
    }
  }
}

}  // namespace m3
