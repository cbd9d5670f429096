// One streaming benchmark request against an OpenAI-compatible server, measured as vLLM's bench client does
// (spec/serving-api.md §6.1): TTFT is the arrival of the first SSE chunk with non-empty `choices`, ITL the
// gaps between such chunks, latency the arrival of the last one; output tokens come from the final usage
// chunk. An unreachable server, an HTTP error status, an error event, a malformed chunk or a stream that ends
// before `data: [DONE]` make the request failed (never an exception).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/http_client.h"
#include "bench/sample_request.h"

namespace m3::bench {

enum class ApiKind { kCompletions, kChat };

// Where and how requests are sent.
struct Endpoint {
  std::string base_url;  // scheme://host[:port][/prefix]
  std::string path;      // e.g. /v1/completions (appended to the base URL's prefix)
  ApiKind kind = ApiKind::kCompletions;
  std::string model;                                     // the "model" field of every request
  HeaderList headers;                                    // Authorization, --header KEY=VALUE ...
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every payload (sampling, --extra-body)
  bool ignore_eos = false;
  std::optional<int> logprobs;
};

// What one request measured. Times are seconds; start_time counts from the benchmark's start.
struct RequestOutput {
  bool success = false;
  std::string error;                 // why it failed ("" on success)
  std::string generated_text;        // completion text, or chat reasoning + content
  int prompt_len = 0;                // usage.prompt_tokens when the server sent it, else the dataset's count
  int output_tokens = 0;             // usage.completion_tokens; 0 when the server sent no usage
  std::optional<int> cached_tokens;  // usage.prompt_tokens_details.cached_tokens, when the server sent it
  double start_time = 0.0;
  double ttft = 0.0;
  double latency = 0.0;
  std::vector<double> itl;
  double client_queue_time = 0.0;  // waiting for a --max-concurrency slot before being sent
};

// The JSON body vLLM's bench client sends for `req` (stream with include_usage; max_tokens or
// max_completion_tokens; chat content as one text part), with ignore_eos and extra_body merged in. Chat
// requests with a history (req.messages) send it instead, user content as a text part.
nlohmann::json build_payload(const Endpoint& ep, const SampleRequest& req);

// Incremental Server-Sent-Events reader: bytes in (split anywhere), the `data` payloads of complete events
// out. Comment lines (":") and other fields are skipped; CRLF and LF line ends are both accepted.
class SseReader {
 public:
  std::vector<std::string> feed(std::string_view bytes);
  // The payload of a last event that was not followed by a blank line, if any.
  std::optional<std::string> finish();

 private:
  void line(std::string_view l, std::vector<std::string>& out);
  std::string partial_;  // bytes of an unfinished line
  std::string data_;     // data lines of the current event
  bool has_data_ = false;
};

// Folds the SSE payloads of one response into a RequestOutput, timing chunks as they arrive.
class StreamTimeline {
 public:
  StreamTimeline(ApiKind kind, double start_time, int prompt_len);
  // One event payload that arrived at `now` (seconds on the start_time clock). Returns false once the
  // stream is over ([DONE], an error event or a malformed chunk): later payloads are ignored.
  bool on_payload(const std::string& payload, double now);
  // The result once the body has ended; `transport_error` is set when the connection failed or broke.
  RequestOutput finish(const std::string& transport_error) &&;

 private:
  ApiKind kind_;
  RequestOutput out_;
  bool first_ = false;  // a chunk with choices has arrived
  bool done_ = false;   // [DONE] seen
  double last_ = 0.0;   // arrival of the latest chunk with choices
  std::string error_;
};

// Sends benchmark requests to one endpoint through a shared HttpClient (whose connections it reuses). Holds
// no per-request state, so any thread may start requests; `ep` and `http` must outlive every request.
class RequestClient {
 public:
  using Done = std::function<void(RequestOutput&&)>;
  RequestClient(const Endpoint& ep, std::chrono::steady_clock::time_point epoch, HttpClient& http);

  // Sends `req` and returns at once; `done` gets the result on an I/O thread (see HttpCallbacks).
  void start(const SampleRequest& req, const std::string& request_id, Done done) const;
  // start() and wait for the result. Not from an I/O thread.
  RequestOutput send(const SampleRequest& req, const std::string& request_id) const;

 private:
  const Endpoint& ep_;
  const std::chrono::steady_clock::time_point epoch_;
  const std::string url_;  // base URL + path
  HttpClient& http_;
};

// GET base_url + path and parse the JSON body. Throws m3::Error(kUnavailable) naming the URL when the server
// cannot be reached or does not answer 200 with JSON.
nlohmann::json get_json(const std::string& base_url, const std::string& path, const HeaderList& headers);

}  // namespace m3::bench
