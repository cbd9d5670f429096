// Progress of a benchmark run on stderr: a tqdm-style bar redrawn in place when stderr is a terminal, a plain
// line every few seconds otherwise (logs, CI). Workers call advance() from any thread; a reporter thread
// draws, so a slow terminal never delays a request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace m3::bench {

class ProgressBar {
 public:
  // Draws nothing when !enabled.
  ProgressBar(int total, bool enabled);
  ~ProgressBar();  // draws the final state and stops the reporter
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(bool failed);

  // "37%|███▋      | 37/100 [00:12<00:20,  3.01it/s]", as tqdm draws it (`elapsed` in seconds).
  static std::string bar_line(int done, int total, double elapsed);

 private:
  void report(bool final);
  const int total_;
  const bool enabled_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<int> done_{0}, failed_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int last_reported_ = -1;  // only touched by the reporter, then by the destructor after it stopped
  std::thread reporter_;
};

}  // namespace m3::bench
