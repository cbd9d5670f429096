// Test support for the http transport: a raw-socket client that sends exact bytes and parses responses with
// deadlines (a server that hangs fails the test instead of hanging it), and a Server running on a loopback
// port in a background thread. Nothing here uses the code under test to check itself.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "http/server.h"

namespace m3::http::test {

struct ParsedResponse {
  int status = 0;
  std::string status_line;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;      // de-chunked
  std::string raw_body;  // as it came on the wire
  bool chunked = false;
  bool close_delimited = false;  // the body ran until the server closed

  std::string header(std::string_view name) const;  // "" when absent
  bool has_header(std::string_view name) const;
  size_t header_count(std::string_view name) const;
};

class RawClient {
 public:
  // `receive_buffer` > 0 shrinks SO_RCVBUF before connecting (a peer that reads slowly or not at all).
  explicit RawClient(int port, double timeout_s = 10, int receive_buffer = 0);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool send(std::string_view bytes);
  // One response (1xx interim responses are skipped unless `keep_interim`); nullopt on timeout, on a close
  // before the response is complete, or on a malformed response.
  std::optional<ParsedResponse> read_response(bool head_request = false, bool keep_interim = false);
  // True when the server closes the connection (EOF or reset) within `timeout_s`. Bytes that arrive meanwhile
  // are kept in received().
  bool wait_closed(double timeout_s);
  // True when bytes (or EOF) are readable within `timeout_s`, without consuming them.
  bool readable_within(double timeout_s);
  const std::string& received() const { return buffer_; }
  void close();

 private:
  // Appends what arrives before `deadline_s` (seconds from now); false on timeout, EOF or error.
  bool receive_some(double timeout_s);

  int fd_ = -1;
  double timeout_s_;
  bool eof_ = false;
  std::string buffer_;
};

// A Server on 127.0.0.1 with an OS-chosen port, run() on a background thread; stopped and joined on
// destruction.
class TestServer {
 public:
  TestServer(ServerLimits limits, Handler handler, ErrorRenderer renderer = nullptr);
  ~TestServer();
  int port() const { return port_; }
  Server& server() { return *server_; }
  // stop() and wait for run() to return; false when it did not return within `timeout_s`.
  bool stop_and_join(double timeout_s);

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// Small limits and short timeouts, so limit tests send little and timeout tests wait little.
ServerLimits small_limits();
// Echoes the request: body as the response body, the rest in X- headers (method, path, query, version, body
// size, remaining Content-Encoding / Content-Length fields, header count).
Handler echo_handler();
// Renders refusals as {"status":N,"message":"...","method":"...","path":"..."} so tests can read what the
// transport passed.
ErrorRenderer test_renderer();
// Polls `predicate` until it holds or `timeout_s` passes (for state the server changes asynchronously).
bool eventually(const std::function<bool()>& predicate, double timeout_s);
// Resident-set figures of this process from /proc/self/status, in KiB.
long vm_kib(const char* field);

}  // namespace m3::http::test
