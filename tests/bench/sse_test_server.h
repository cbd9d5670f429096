// A canned OpenAI-style streaming server for the bench client tests, on Asio: one thread, one coroutine per
// connection, so it holds thousands of open streams cheaply. A handler maps each request to a reply (status,
// SSE events, or a connection dropped mid-stream). Replies can be held until N streams are open at once: that
// is how a test proves N requests were truly in flight together, with no sleeps.
#pragma once

#include <utility>  // first: Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace m3::bench {

struct TestRequest {
  std::string method, target, body;
  std::map<std::string, std::string> headers;  // names in lower case
};

struct TestReply {
  int status = 200;
  std::vector<std::string> chunks;  // 200: SSE text sent as one HTTP chunk each; else joined into the body
  bool complete = true;             // false: the connection is dropped after the chunks, mid-stream
  bool chunked = true;              // false (200 only): no framing, the body ends when the connection closes
  bool stall = false;               // true (200 only): after the chunks, silence until the server stops
};

class SseTestServer {
 public:
  using Handler = std::function<TestReply(const TestRequest&)>;
  // With hold_until_open > 0, no reply starts before that many streams are open at once, or 20 s passed (so a
  // client that never gets there fails the test's assertions rather than hanging it).
  explicit SseTestServer(Handler handler, size_t hold_until_open = 0);
  ~SseTestServer();

  std::string url() const;                    // http://127.0.0.1:PORT
  size_t peak_open() const { return peak_; }  // most streams open at once (request read, reply unfinished)
  size_t connections() const { return connections_; }  // connections accepted

 private:
  boost::asio::awaitable<void> accept();
  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket socket);

  const Handler handler_;
  const size_t hold_until_open_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer gate_;  // replies held by hold_until_open wait on it
  bool released_ = false;           // touched only on the server thread
  size_t open_ = 0;                 // likewise
  std::atomic<size_t> peak_{0}, connections_{0};
  std::thread thread_;
};

}  // namespace m3::bench
