// One benchmark request on the asynchronous HttpClient: body bytes go through the SseReader into the
// StreamTimeline as they arrive (on an I/O thread), so every SSE chunk is timed on arrival, not when the
// response ends. Error texts are cut at a UTF-8 boundary so they can go into the result JSON.
#include "bench/request_client.h"

#include <algorithm>
#include <future>
#include <memory>

#include "common/error.h"

namespace m3::bench {
namespace {

using nlohmann::json;

constexpr size_t kMaxErrorText = 300;

// At most kMaxErrorText bytes of `s`, not ending inside a UTF-8 sequence.
std::string clip(std::string_view s) {
  if (s.size() <= kMaxErrorText) return std::string(s);
  size_t n = kMaxErrorText;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

constexpr size_t kMaxErrorBody = 4096;  // of a non-200 answer, kept for the error text

// base_url (which may carry a path prefix) + path, without a doubled slash.
std::string join_url(std::string base_url, const std::string& path) {
  while (!base_url.empty() && base_url.back() == '/') base_url.pop_back();
  return base_url + path;
}

double seconds_since(std::chrono::steady_clock::time_point epoch) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count();
}

// The message of an OpenAI-shaped error ({"error": {"message"}} or {"message"}), else the raw text.
std::string error_text(const json& e) {
  if (e.is_string()) return clip(e.get<std::string>());
  if (e.is_object()) {
    if (e.contains("message") && e["message"].is_string()) return clip(e["message"].get<std::string>());
    if (e.contains("error")) return error_text(e["error"]);
  }
  return clip(e.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string error_body_text(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return j.is_discarded() ? clip(body) : error_text(j);
}

// "HTTP 503 Service Unavailable: <the error's message>".
std::string status_text(const HttpResponseHead& head, const std::string& body) {
  std::string s = "HTTP " + std::to_string(head.status) + (head.reason.empty() ? "" : " " + head.reason);
  return body.empty() ? s : s + ": " + error_body_text(body);
}

void append_string(std::string& out, const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) out += it->get_ref<const std::string&>();
}

}  // namespace

json build_payload(const Endpoint& ep, const SampleRequest& req) {
  json p;
  if (ep.kind == ApiKind::kCompletions) {
    p = {{"model", ep.model},
         {"prompt", req.prompt},
         {"repetition_penalty", 1.0},
         {"max_tokens", req.expected_output_len},
         {"logprobs", ep.logprobs ? json(*ep.logprobs) : json(nullptr)},
         {"stream", true},
         {"stream_options", {{"include_usage", true}}}};
  } else {
    auto text_part = [](const std::string& text) {
      return json::array({{{"type", "text"}, {"text", text}}});
    };
    json messages = json::array();
    if (req.messages.empty()) messages.push_back({{"role", "user"}, {"content", text_part(req.prompt)}});
    for (const ChatMessage& m : req.messages)
      messages.push_back(
          {{"role", m.role}, {"content", m.role == "user" ? text_part(m.content) : json(m.content)}});
    p = {{"model", ep.model},
         {"messages", std::move(messages)},
         {"max_completion_tokens", req.expected_output_len},
         {"stream", true},
         {"stream_options", {{"include_usage", true}}}};
  }
  if (ep.ignore_eos) p["ignore_eos"] = true;
  for (const auto& [key, value] : ep.extra_body.items()) p[key] = value;
  return p;
}

std::vector<std::string> SseReader::feed(std::string_view bytes) {
  std::vector<std::string> out;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      break;
    }
    partial_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    std::string l = std::move(partial_);
    partial_.clear();
    if (!l.empty() && l.back() == '\r') l.pop_back();
    line(l, out);
  }
  return out;
}

std::optional<std::string> SseReader::finish() {
  if (!partial_.empty()) {
    std::vector<std::string> out;
    std::string l = std::move(partial_);
    partial_.clear();
    if (!l.empty() && l.back() == '\r') l.pop_back();
    line(l, out);
    if (!out.empty()) return out.front();
  }
  if (!has_data_) return std::nullopt;
  has_data_ = false;
  return std::exchange(data_, std::string());
}

void SseReader::line(std::string_view l, std::vector<std::string>& out) {
  if (l.empty()) {  // end of an event
    if (has_data_) out.push_back(std::exchange(data_, std::string()));
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment (keep-alive ping)
  const size_t colon = l.find(':');
  if (l.substr(0, colon) != "data") return;  // event:, id:, retry:
  std::string_view value = colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

StreamTimeline::StreamTimeline(ApiKind kind, double start_time, int prompt_len) : kind_(kind) {
  out_.start_time = start_time;
  out_.prompt_len = prompt_len;
}

bool StreamTimeline::on_payload(const std::string& payload, double now) {
  if (done_ || !error_.empty()) return false;
  if (payload == "[DONE]") {
    done_ = true;
    return false;
  }
  const json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "malformed stream chunk: " + clip(payload);
    return false;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    error_ = "error event in the stream: " + error_text(j["error"]);
    return false;
  }
  const auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    if (!first_) {
      first_ = true;
      out_.ttft = now - out_.start_time;
    } else {
      out_.itl.push_back(now - last_);
    }
    last_ = now;
    const json& c = choices->front();
    if (c.is_object() && kind_ == ApiKind::kCompletions) {
      append_string(out_.generated_text, c, "text");
    } else if (c.is_object() && c.contains("delta") && c["delta"].is_object()) {
      const json& d = c["delta"];
      // Servers send the reasoning as `reasoning_content`, `reasoning` or both (the same text).
      append_string(out_.generated_text, d,
                    d.contains("reasoning_content") ? "reasoning_content" : "reasoning");
      append_string(out_.generated_text, d, "content");
    }
  }
  const auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    const auto completion = usage->find("completion_tokens");
    if (completion != usage->end() && completion->is_number_integer())
      out_.output_tokens = completion->get<int>();
    const auto prompt = usage->find("prompt_tokens");
    if (prompt != usage->end() && prompt->is_number_integer()) out_.prompt_len = prompt->get<int>();
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) {
      const auto cached = details->find("cached_tokens");
      if (cached != details->end() && cached->is_number_integer()) out_.cached_tokens = cached->get<int>();
    }
  }
  return true;
}

RequestOutput StreamTimeline::finish(const std::string& transport_error) && {
  if (first_) out_.latency = last_ - out_.start_time;
  if (!error_.empty()) {
    out_.error = error_;
  } else if (!transport_error.empty()) {
    out_.error = transport_error;
  } else if (!first_) {
    out_.error = "Never received a valid chunk to calculate TTFT. This response will be marked as failed!";
  } else if (!done_) {
    out_.error = "the stream ended before data: [DONE]";
  }
  out_.success = out_.error.empty();
  return std::move(out_);
}

RequestClient::RequestClient(const Endpoint& ep, std::chrono::steady_clock::time_point epoch,
                             HttpClient& http)
    : ep_(ep), epoch_(epoch), url_(join_url(ep.base_url, ep.path)), http_(http) {}

void RequestClient::start(const SampleRequest& req, const std::string& request_id, Done done) const {
  HttpRequest r{"POST", url_, ep_.headers, build_payload(ep_, req).dump()};
  if (!request_id.empty()) r.headers.emplace_back("x-request-id", request_id);
  r.headers.emplace_back("Content-Type", "application/json");

  // What the callbacks share; they run one at a time (HttpCallbacks), so it needs no lock.
  struct Stream {
    Stream(ApiKind kind, double start, int prompt_len) : timeline(kind, start, prompt_len) {}
    HttpResponseHead head;
    std::string error_body;
    SseReader sse;
    StreamTimeline timeline;
  };
  const auto epoch = epoch_;
  auto s = std::make_shared<Stream>(ep_.kind, seconds_since(epoch), req.prompt_len);
  HttpCallbacks cb;
  cb.on_head = [s](const HttpResponseHead& head) { s->head = head; };
  cb.on_body = [s, epoch](std::string_view bytes) {
    if (s->head.status != 200) {
      s->error_body.append(bytes.substr(0, kMaxErrorBody - std::min(kMaxErrorBody, s->error_body.size())));
      return;
    }
    const double now = seconds_since(epoch);
    for (const std::string& payload : s->sse.feed(bytes)) s->timeline.on_payload(payload, now);
  };
  cb.on_done = [s, epoch, done = std::move(done)](const std::string& error) {
    std::string transport = error;
    if (s->head.status != 0 && s->head.status != 200) {
      transport = status_text(s->head, s->error_body);
    } else if (error.empty()) {
      if (std::optional<std::string> last = s->sse.finish())
        s->timeline.on_payload(*last, seconds_since(epoch));
    }
    done(std::move(s->timeline).finish(transport));
  };
  http_.send(std::move(r), std::move(cb));
}

RequestOutput RequestClient::send(const SampleRequest& req, const std::string& request_id) const {
  auto result = std::make_shared<std::promise<RequestOutput>>();
  std::future<RequestOutput> out = result->get_future();
  start(req, request_id, [result](RequestOutput&& o) { result->set_value(std::move(o)); });
  return out.get();
}

json get_json(const std::string& base_url, const std::string& path, const HeaderList& headers) {
  const std::string url = join_url(base_url, path);
  HttpClientOptions options;
  options.io_threads = 1;
  options.connect_timeout = std::chrono::seconds(10);
  options.inactivity_timeout = std::chrono::seconds(60);
  HttpClient http(options);
  const HttpResult res = http.fetch({"GET", url, headers, ""});
  if (!res.error.empty()) fail(ErrorKind::kUnavailable, res.error);
  if (res.head.status != 200)
    fail(ErrorKind::kUnavailable, url + " answered " + status_text(res.head, res.body));
  json j = json::parse(res.body, nullptr, false);
  if (j.is_discarded()) fail(ErrorKind::kUnavailable, url + " did not answer JSON: " + clip(res.body));
  return j;
}

}  // namespace m3::bench
