// Event-driven HTTP/1.1 server on Boost.Beast / Asio: a fixed pool of I/O threads, one small state object per
// connection (no thread per connection), strict RFC 9112 framing, size limits and timeouts, bounded streaming
// decompression of request bodies, keep-alive and pipelining (answers in order), HTTP/1.0 answered without
// chunked encoding, and a cap on open connections (503 beyond it). Route logic lives above, behind Handler.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "http/message.h"

namespace m3::http {

struct ServerLimits {
  size_t max_body_bytes = 32u << 20;    // on the wire and after decompression: 413 the moment it is crossed
  size_t max_header_bytes = 32u << 10;  // the whole head (request line + fields): 431
  size_t max_headers = 100;             // number of fields: 431
  size_t max_target_bytes = 8u << 10;   // request target: 414
  size_t max_connections = 16384;       // open connections; beyond: 503 + close
  double header_timeout_s = 10;         // from the first byte of a request to the end of its head: 408
  double body_timeout_s = 60;           // from the end of the head to the end of the body: 408
  double idle_timeout_s = 60;           // keep-alive wait for the next request: closed quietly
  double write_timeout_s = 60;          // a write making no progress for this long: the connection is closed
  size_t max_buffered_output = 64u << 20;  // bytes queued for a slow reader before the connection is dropped
  bool decompress = true;                  // gzip / deflate / br bodies inflated; false: 415
  int io_threads = 0;                      // 0: min(4, hardware threads)
};

class Server {
 public:
  Server(ServerLimits limits, Handler handler, ErrorRenderer render_error);
  ~Server();  // stops and joins

  // Binds and listens (backlog 4096, SO_REUSEADDR, not SO_REUSEPORT); port 0 picks a free one. False when the
  // address cannot be bound.
  bool bind(const std::string& host, int port);
  int port() const;
  void run();   // runs the I/O threads; blocks until stop()
  void stop();  // stops accepting, closes every connection, makes run() return; callable from any thread
  size_t connections() const;  // open right now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace m3::http
