// Thread policy, cut points and the worker pool of parallel encoding (see parallel_encode.h). The pool grows
// on demand and is never destroyed, so its idle threads outlive static destructors harmlessly.
#include "tokenizer/parallel_encode.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "tokenizer/added_tokens.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace m3::tok {

size_t max_encode_threads() {
  if (const char* env = std::getenv("M3_TOKENIZER_THREADS"); env != nullptr) {
    const std::string_view s(env);
    size_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec == std::errc::result_out_of_range) return kMaxEncodeThreads;
    if (ec == std::errc() && end == s.data() + s.size() && n >= 1) return std::min(n, kMaxEncodeThreads);
  }
  static const size_t hardware = std::thread::hardware_concurrency();  // asking reads /sys each time
  return std::clamp<size_t>(hardware, 1, kMaxEncodeThreads);
}

size_t encode_threads(size_t text_bytes, size_t max_threads) {
  if (max_threads <= 1 || text_bytes < kParallelMinBytes) return 1;
  return std::clamp<size_t>(text_bytes / kBytesPerThread, 2, std::min(max_threads, kMaxEncodeThreads));
}

namespace {

bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

}  // namespace

size_t next_cut(std::string_view text, size_t from, const Normalizer& normalizer,
                const PreTokenizer& pre_tokenizer) {
  from = std::max<size_t>(from, 1);
  while (from < text.size() && is_continuation(text[from])) ++from;
  if (from >= text.size()) return std::string_view::npos;
  size_t i = from - 1;
  while (i > 0 && is_continuation(text[i])) --i;
  char32_t before = next_code_point(text, i);
  while (i < text.size()) {
    const size_t at_offset = i;
    const char32_t at = next_code_point(text, i);
    if (i < text.size() && pre_tokenizer.splits_between(before, at)) {
      size_t j = i;
      const char32_t after = next_code_point(text, j);
      if (normalizer.is_inert_starter(before) && normalizer.is_inert_starter(at) &&
          normalizer.is_inert_starter(after)) {
        return at_offset;
      }
    }
    before = at;
  }
  return std::string_view::npos;
}

std::vector<size_t> cut_points(std::string_view text, size_t piece_bytes, const Normalizer& normalizer,
                               const PreTokenizer& pre_tokenizer) {
  std::vector<size_t> starts{0};
  piece_bytes = std::max<size_t>(piece_bytes, 1);
  // Each search starts past the previous cut, so the text is scanned at most once in all.
  for (size_t at = piece_bytes; at < text.size(); at = starts.back() + piece_bytes) {
    const size_t cut = next_cut(text, at, normalizer, pre_tokenizer);
    if (cut == std::string_view::npos) break;
    starts.push_back(cut);
  }
  return starts;
}

std::vector<size_t> raw_cut_points(std::string_view text, size_t pieces, const AddedTokens& added) {
  std::vector<size_t> starts{0};
  pieces = std::max<size_t>(pieces, 1);
  for (size_t k = 1; k < pieces; ++k) {
    size_t cut = std::max(text.size() / pieces * k, starts.back() + 1);
    while (cut < text.size() && !(static_cast<unsigned char>(text[cut]) < 0x80 &&
                                  added.splits_at(text, cut, AddedTokens::Stage::kRaw))) {
      ++cut;
    }
    if (cut >= text.size()) break;
    starts.push_back(cut);
  }
  return starts;
}

namespace {

class WorkerPool {
 public:
  static WorkerPool& shared() {
    static WorkerPool* pool = new WorkerPool;
    return *pool;
  }

  void run(size_t n, size_t threads, const std::function<void(size_t)>& task) {
    Job job;
    job.task = &task;
    job.n = n;
    job.helpers_wanted = std::min(threads, n) - 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (threads_.size() < std::min(job.helpers_wanted, kMaxEncodeThreads - 1)) {
        threads_.emplace_back([this] { serve(); });
      }
      queue_.push_back(&job);
    }
    wake_.notify_all();
    work(job);
    std::unique_lock<std::mutex> lock(mu_);
    // Every task is claimed; stop new helpers from joining and wait for those that did.
    if (auto it = std::find(queue_.begin(), queue_.end(), &job); it != queue_.end()) queue_.erase(it);
    done_.wait(lock, [&] { return job.helpers_active == 0; });
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    const std::function<void(size_t)>* task = nullptr;
    size_t n = 0;
    std::atomic<size_t> next{0};
    size_t helpers_wanted = 0;  // pool threads that may still join; the rest under mu_ too
    size_t helpers_active = 0;
    std::exception_ptr error;
  };

  // Claims and runs tasks until none are left.
  void work(Job& job) {
    for (size_t i = job.next.fetch_add(1); i < job.n; i = job.next.fetch_add(1)) {
      try {
        (*job.task)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!job.error) job.error = std::current_exception();
        job.next.store(job.n);
      }
    }
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return !queue_.empty(); });
      Job* job = queue_.front();
      if (--job->helpers_wanted == 0) queue_.pop_front();
      ++job->helpers_active;
      lock.unlock();
      work(*job);
      lock.lock();
      if (--job->helpers_active == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Job*> queue_;  // jobs that still take helpers, oldest first
  std::vector<std::thread> threads_;
};

}  // namespace

void run_parallel(size_t n, size_t threads, const std::function<void(size_t)>& task) {
  if (threads <= 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) task(i);
    return;
  }
  WorkerPool::shared().run(n, threads, task);
}

}  // namespace m3::tok
