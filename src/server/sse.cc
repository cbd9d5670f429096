// One answer driven by its runs: run r starts when run r-1 ends; the last one's end writes `finish`.
#include "server/sse.h"

#include <chrono>
#include <random>

namespace m3 {

std::string random_id(const std::string& prefix, int hex_chars) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < hex_chars; ++i) s += hex[rng() & 15];
  return s;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sse_data(const nlohmann::json& j) {
  return "data: " + j.dump() + "\n\n";
}

std::string sse_event(const std::string& type, const nlohmann::json& j) {
  return "event: " + type + "\ndata: " + j.dump() + "\n\n";
}

namespace {

struct Answer {
  std::shared_ptr<http::Responder> out;
  http::Headers headers;
  std::string content_type;
  bool stream = false;
  std::string body;  // collected text of a non-streamed answer
  std::vector<std::shared_ptr<GenerationRun>> runs;
  std::function<std::string(size_t, int, OutputDelta&)> on_delta;
  std::function<std::string()> finish;
};

void emit(Answer& a, std::string text) {
  if (text.empty()) return;
  if (a.stream)
    a.out->write(std::move(text));
  else
    a.body += text;
}

void start_run(const std::shared_ptr<Answer>& a, size_t r) {
  if (r == a->runs.size()) {
    emit(*a, a->finish());
    if (a->stream) {
      a->out->end();
    } else {
      http::Response res;
      res.headers = a->headers;
      res.set_content(std::move(a->body), a->content_type);
      a->out->send(std::move(res));
    }
    a->runs.clear();  // breaks the cycle runs -> on_delta -> answer
    return;
  }
  // The delta writer holds the answer weakly; on_done holds it until the next run takes over.
  std::weak_ptr<Answer> weak = a;
  a->runs[r]->start(
      [weak, r](int choice, OutputDelta& d) {
        if (auto self = weak.lock()) emit(*self, self->on_delta(r, choice, d));
      },
      [a, r](bool finished) {
        if (finished) start_run(a, r + 1);
      });
}

}  // namespace

void respond_with_runs(Reply& res, const std::string& content_type,
                       std::vector<std::shared_ptr<GenerationRun>> runs,
                       std::function<std::string(size_t, int, OutputDelta&)> on_delta,
                       std::function<std::string()> finish) {
  auto a = std::make_shared<Answer>();
  a->content_type = content_type;
  a->stream = content_type == "text/event-stream";
  a->runs = std::move(runs);
  a->on_delta = std::move(on_delta);
  a->finish = std::move(finish);
  if (a->stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
  }
  res.defer([a](std::shared_ptr<http::Responder> out, const http::Headers& headers) {
    a->out = out;
    a->headers = headers;
    if (a->stream) out->start_stream(200, headers, a->content_type);
    // A client that leaves cancels every run (the answer's runs list is read before any is cleared).
    std::vector<std::weak_ptr<GenerationRun>> runs(a->runs.begin(), a->runs.end());
    out->on_close([runs] {
      for (const auto& w : runs)
        if (auto r = w.lock()) r->cancel();
    });
    start_run(a, 0);
  });
}

}  // namespace m3
