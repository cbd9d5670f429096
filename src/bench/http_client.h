// Asynchronous HTTP/1.1 client of `m3 bench serve` on Boost.Beast / Asio: one io_context on a small fixed set
// of threads drives any number of requests (no thread per request), reusing keep-alive connections per host.
// Body bytes reach the caller as they arrive, so streamed (SSE) chunks can be timed. Every request ends with
// exactly one on_done, with an error text when it failed (never an exception); plain http:// only.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m3::bench {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";
  std::string url;  // http://host[:port]/target
  HeaderList headers;
  std::string body;
};

struct HttpResponseHead {
  int status = 0;
  std::string reason;
  HeaderList headers;
};

// Called on an I/O thread, one at a time per request and in this order: on_head once a response head arrived,
// on_body for each piece of the (de-chunked) body, on_done last ("" on success, else why the request failed).
// They must not block: every request of the client shares the I/O threads.
struct HttpCallbacks {
  std::function<void(const HttpResponseHead&)> on_head;
  std::function<void(std::string_view bytes)> on_body;
  std::function<void(const std::string& error)> on_done;
};

struct HttpClientOptions {
  int io_threads = 2;
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);
  // Longest wait for the next bytes while sending or receiving: a queued request may wait long for its first
  // token, but a server that says nothing for this long is taken as gone.
  std::chrono::milliseconds inactivity_timeout = std::chrono::minutes(10);
};

// A whole response, for small requests (fetch).
struct HttpResult {
  std::string error;  // "" when a response arrived, whatever its status
  HttpResponseHead head;
  std::string body;
};

class HttpClient {
 public:
  // Raises the soft open-file limit to the hard one (best effort) so thousands of connections can be open.
  explicit HttpClient(HttpClientOptions options = {});
  // Stops the I/O threads; requests still in flight are dropped without on_done, so wait for them first.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Thread-safe; returns at once. The callbacks are released right after on_done.
  void send(HttpRequest request, HttpCallbacks callbacks);

  // Sends and waits for the whole response. Not from an I/O thread (a callback).
  HttpResult fetch(HttpRequest request);

  struct Impl;  // the io_context, its threads and the idle connections (http_client.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace m3::bench
