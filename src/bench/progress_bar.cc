// The reporter wakes every 100 ms on a terminal and every 5 s otherwise; the plain line is only printed when
// something changed, so an idle log stays short.
#include "bench/progress_bar.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace m3::bench {
namespace {

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(int total, bool enabled)
    : total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {
  if (!enabled_) return;
  reporter_ = std::thread([this] {
    const auto period = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) report(false);
  });
}

ProgressBar::~ProgressBar() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reporter_.join();
  report(true);
}

void ProgressBar::advance(bool failed) {
  if (failed) failed_.fetch_add(1);
  done_.fetch_add(1);
}

std::string ProgressBar::bar_line(int done, int total, double elapsed) {
  static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  constexpr int kWidth = 30;
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / total) : 1.0;
  const int eighths = static_cast<int>(frac * kWidth * 8);
  std::string bar;
  for (int i = 0; i < eighths / 8; ++i) bar += "█";
  int cells = eighths / 8;
  if (cells < kWidth && eighths % 8) {
    bar += kEighths[eighths % 8];
    ++cells;
  }
  bar.append(static_cast<size_t>(kWidth - cells), ' ');
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const std::string remaining = rate > 0 ? clock_text((total - done) / rate) : "?";
  char head[16], tail[64];
  std::snprintf(head, sizeof head, "%3.0f%%|", frac * 100);
  if (rate > 0 && rate < 1)
    std::snprintf(tail, sizeof tail, "%5.2fs/it]", 1.0 / rate);
  else if (rate > 0)
    std::snprintf(tail, sizeof tail, "%5.2fit/s]", rate);
  else
    std::snprintf(tail, sizeof tail, "?it/s]");
  return head + bar + "| " + std::to_string(done) + "/" + std::to_string(total) + " [" + clock_text(elapsed) +
         "<" + remaining + ", " + tail;
}

void ProgressBar::report(bool final) {
  const int done = done_.load(), failed = failed_.load();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K", bar_line(done, total_, elapsed).c_str());  // erase a longer old line
    if (final) std::fprintf(stderr, "\n");
  } else if (done != last_reported_ || final) {
    std::fprintf(stderr, "progress: %d/%d requests done (%d failed), %.1f s elapsed\n", done, total_, failed,
                 elapsed);
  }
  last_reported_ = done;
  std::fflush(stderr);
}

}  // namespace m3::bench
