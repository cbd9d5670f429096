// The provider runs once: it drives every run to completion and then ends the chunked body.
#include "server/sse.h"

#include <chrono>
#include <random>

#include <httplib.h>

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

void respond_with_runs(httplib::Response& res, const std::string& content_type,
                       std::vector<std::shared_ptr<GenerationRun>> runs,
                       std::function<std::string(size_t, int, OutputDelta&)> on_delta,
                       std::function<std::string()> finish) {
  if (content_type == "text/event-stream") {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
  }
  res.set_chunked_content_provider(content_type, [runs, on_delta, finish](size_t, httplib::DataSink& sink) {
    bool ok = true;
    auto write = [&](const std::string& s) {
      if (!s.empty() && ok) ok = sink.write(s.data(), s.size());
    };
    for (size_t r = 0; r < runs.size() && ok; ++r) {
      bool finished = runs[r]->run([&] { return ok && sink.is_writable(); },
                                   [&](int choice, OutputDelta& d) { write(on_delta(r, choice, d)); });
      ok = ok && finished;
    }
    if (!ok) return false;  // the client is gone: the runs were aborted
    write(finish());
    sink.done();
    return ok;
  });
}

}  // namespace m3
