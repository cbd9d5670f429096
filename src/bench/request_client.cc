// HTTP side of one benchmark request (cpp-httplib, one keep-alive connection per RequestClient): the body is
// read through a content receiver so every SSE chunk is timed when its bytes arrive, not when the response
// ends. Error texts are cut at a UTF-8 boundary so they can go into the result JSON.
#include "bench/request_client.h"

#include <httplib.h>

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

// "http://host:port/prefix/" -> {"http://host:port", "/prefix"}.
std::pair<std::string, std::string> split_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {url, ""};
  std::string prefix = url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, slash), prefix};
}

std::string describe(httplib::Error e, const std::string& url) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect to " + url + " (connection refused or host unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "timed out connecting to " + url;
    case httplib::Error::Read:
      return "the connection to " + url + " broke while reading the response";
    case httplib::Error::Write:
      return "the connection to " + url + " broke while sending the request";
    default:
      return "request to " + url + " failed: " + httplib::to_string(e);
  }
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
    const json content = json::array({{{"type", "text"}, {"text", req.prompt}}});
    p = {{"model", ep.model},
         {"messages", json::array({{{"role", "user"}, {"content", content}}})},
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

RequestClient::RequestClient(const Endpoint& ep, std::chrono::steady_clock::time_point epoch)
    : ep_(ep), epoch_(epoch) {
  auto [host, prefix] = split_base_url(ep.base_url);
  path_ = prefix + ep.path;
  http_ = std::make_unique<httplib::Client>(host);
  http_->set_keep_alive(true);
  http_->set_connection_timeout(30);
  http_->set_read_timeout(6 * 3600);  // vLLM's per-request limit: queued requests may wait long for a token
  http_->set_write_timeout(60);
}

RequestClient::~RequestClient() = default;

double RequestClient::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

RequestOutput RequestClient::send(const SampleRequest& req, const std::string& request_id) {
  httplib::Request r;
  r.method = "POST";
  r.path = path_;
  for (const auto& [key, value] : ep_.headers) r.set_header(key, value);
  if (!request_id.empty()) r.set_header("x-request-id", request_id);
  r.set_header("Content-Type", "application/json");
  r.body = build_payload(ep_, req).dump();

  int status = 0;
  std::string reason, error_body;
  SseReader sse;
  StreamTimeline timeline(ep_.kind, now(), req.prompt_len);
  r.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    reason = res.reason;
    return true;
  };
  r.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min(n, size_t{4096}));
      return error_body.size() < 4096;
    }
    const double t = now();
    for (const std::string& payload : sse.feed(std::string_view(data, n))) timeline.on_payload(payload, t);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = http_->send(r, res, err);
  std::string transport;
  if (status != 0 && status != 200) {
    transport = "HTTP " + std::to_string(status) + (reason.empty() ? "" : " " + reason);
    if (!error_body.empty()) transport += ": " + error_body_text(error_body);
  } else if (!ok) {
    transport = describe(err, ep_.base_url + ep_.path);
  } else if (std::optional<std::string> last = sse.finish()) {
    timeline.on_payload(*last, now());
  }
  return std::move(timeline).finish(transport);
}

json get_json(const std::string& base_url, const std::string& path,
              const std::vector<std::pair<std::string, std::string>>& headers) {
  auto [host, prefix] = split_base_url(base_url);
  const std::string url = base_url + path;
  httplib::Client http(host);
  http.set_connection_timeout(10);
  http.set_read_timeout(60);
  httplib::Headers h;
  for (const auto& [key, value] : headers) h.emplace(key, value);
  httplib::Result res = http.Get((prefix + path).c_str(), h);
  if (!res) fail(ErrorKind::kUnavailable, describe(res.error(), url));
  if (res->status != 200)
    fail(ErrorKind::kUnavailable,
         url + " answered HTTP " + std::to_string(res->status) + ": " + error_body_text(res->body));
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) fail(ErrorKind::kUnavailable, url + " did not answer JSON: " + clip(res->body));
  return j;
}

}  // namespace m3::bench
