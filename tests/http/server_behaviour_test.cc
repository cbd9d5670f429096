// Connection behaviour of the Server: keep-alive and pipelining (answers in order), HTTP/1.0, chunked and
// close-delimited streams from another thread, HEAD, 100-continue, the four timeouts, the connection cap,
// on_close when a peer leaves or the server stops, dropped / throwing handlers, slow readers, and thousands
// of idle connections. Deadlines in these tests only turn a hang into a failure; nothing asserts speed.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "test_client.h"

namespace m3::http {
namespace {

using test::RawClient;
using test::TestServer;

// Threads that handlers start, joined when the test ends (after the server has stopped).
struct Workers {
  std::mutex mu;
  std::vector<std::thread> threads;
  void spawn(std::function<void()> fn) {
    std::lock_guard lock(mu);
    threads.emplace_back(std::move(fn));
  }
  ~Workers() {
    for (auto& t : threads) t.join();
  }
};

// Requests that the test answers itself, and how many of them saw on_close.
struct Parked {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Responder>> responders;
  std::atomic<int> closed{0};

  void add(std::shared_ptr<Responder> r) {
    r->on_close([this] {
      closed.fetch_add(1);
      cv.notify_all();
    });
    std::lock_guard lock(mu);
    responders.push_back(std::move(r));
    cv.notify_all();
  }
  std::shared_ptr<Responder> wait(size_t index, double timeout_s = 10) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return responders.size() > index; });
    return responders.size() > index ? responders[index] : nullptr;
  }
  bool wait_closed(int n, double timeout_s = 10) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return closed.load() >= n; });
  }
};

Response text(std::string body) {
  Response r;
  r.set_content(std::move(body), "text/plain");
  return r;
}

// /hello, /stream?n=N (pieces from another thread), /park (answered by the test), /drop (no answer), /throw,
// /flood (writes until write() refuses), /big?mib=N; anything else echoes.
struct Routes {
  Workers workers;
  Parked parked;
  std::atomic<bool> flood_refused{false};
  std::atomic<int> big_answers{0};

  Handler handler() {
    return [this](Request&& req, std::shared_ptr<Responder> responder) {
      if (req.path == "/hello") return responder->send(text("hello world"));
      if (req.path == "/stream") {
        int n = std::stoi(req.query_param("n"));
        return workers.spawn([responder, n] {
          Headers h;
          h.add("Cache-Control", "no-cache");
          responder->start_stream(200, std::move(h), "text/event-stream");
          for (int i = 0; i < n; ++i) responder->write("piece " + std::to_string(i) + "\n");
          responder->end();
        });
      }
      if (req.path == "/park") return parked.add(std::move(responder));
      if (req.path == "/drop") return;
      if (req.path == "/throw") throw std::runtime_error("handler bug");
      if (req.path == "/flood") {
        return workers.spawn([this, responder] {
          responder->start_stream(200, Headers(), "text/event-stream");
          std::string piece(64 << 10, 'f');
          for (int i = 0; i < 16384; ++i) {  // 1 GiB: far past any socket buffer
            if (!responder->write(piece)) {
              flood_refused = true;
              return;
            }
          }
        });
      }
      if (req.path == "/big") {
        responder->send(text(std::string(size_t(std::stoi(req.query_param("mib"))) << 20, 'b')));
        big_answers.fetch_add(1);
        return;
      }
      test::echo_handler()(std::move(req), std::move(responder));
    };
  }
};

class HttpBehaviour : public ::testing::Test {
 protected:
  explicit HttpBehaviour(ServerLimits limits = test::small_limits()) : server_(limits, routes_.handler()) {}
  Routes routes_;  // declared first: destroyed after the server has stopped
  TestServer server_;
};

TEST_F(HttpBehaviour, ReusesAKeepAliveConnection) {
  RawClient c(server_.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r.has_value()) << i;
    EXPECT_EQ(r->body, "hello world");
    EXPECT_FALSE(r->has_header("Connection"));
  }
  EXPECT_EQ(server_.server().connections(), 1u);
}

TEST_F(HttpBehaviour, AnswersPipelinedRequestsInOrder) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send(
      "GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\n\r\n"));
  for (const char* path : {"/a", "/b", "/c"}) {
    auto r = c.read_response();
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->header("X-Path"), path);
  }
}

TEST_F(HttpBehaviour, HoldsAPipelinedRequestUntilTheSlowAnswerBeforeItIsDone) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /park HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n"));
  auto parked = routes_.parked.wait(0);
  ASSERT_NE(parked, nullptr);
  EXPECT_FALSE(c.readable_within(0.3)) << "the second answer overtook the first";
  parked->send(text("first"));
  auto first = c.read_response();
  auto second = c.read_response();
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->body, "first");
  EXPECT_EQ(second->body, "hello world");
}

TEST_F(HttpBehaviour, HonoursConnectionClose) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_TRUE(c.wait_closed(5));
}

TEST_F(HttpBehaviour, ClosesHttp10AfterTheResponseUnlessKeptAlive) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "hello world");
  EXPECT_EQ(r->header("Content-Length"), "11");
  EXPECT_FALSE(r->has_header("Transfer-Encoding"));
  EXPECT_TRUE(c.wait_closed(5));

  RawClient k(server_.port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(k.send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto kr = k.read_response();
    ASSERT_TRUE(kr.has_value()) << i;
    EXPECT_EQ(kr->header("Connection"), "keep-alive");
  }
}

TEST_F(HttpBehaviour, StreamsChunkedToHttp11) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /stream?n=3 HTTP/1.1\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->chunked);
  EXPECT_EQ(r->header("Content-Type"), "text/event-stream");
  EXPECT_EQ(r->header("Cache-Control"), "no-cache");
  EXPECT_FALSE(r->has_header("Content-Length"));
  EXPECT_EQ(r->raw_body, "8\r\npiece 0\n\r\n8\r\npiece 1\n\r\n8\r\npiece 2\n\r\n0\r\n\r\n");
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\n\r\n"));  // the stream left the connection usable
  auto next = c.read_response();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "hello world");
}

TEST_F(HttpBehaviour, StreamsCloseDelimitedToHttp10) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /stream?n=50 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->close_delimited);
  EXPECT_FALSE(r->has_header("Transfer-Encoding"));
  EXPECT_FALSE(r->has_header("Content-Length"));
  EXPECT_EQ(r->header("Connection"), "close");
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += "piece " + std::to_string(i) + "\n";
  EXPECT_EQ(r->body, expected);
}

TEST_F(HttpBehaviour, AnswersHeadWithoutABody) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("HEAD /hello HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n"));
  auto head = c.read_response(/*head_request=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->header("Content-Length"), "11");
  auto get = c.read_response();  // would be garbled if the HEAD answer had carried a body
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->body, "hello world");
}

TEST_F(HttpBehaviour, AnswersHeadOfAStreamWithoutABody) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("HEAD /stream?n=3 HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n"));
  auto head = c.read_response(/*head_request=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  auto get = c.read_response();  // garbled if the HEAD answer carried chunks or a last chunk
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, "hello world");
}

TEST_F(HttpBehaviour, SendsContinueBeforeTheBody) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  auto interim = c.read_response(false, /*keep_interim=*/true);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send("hello"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "hello");
}

TEST_F(HttpBehaviour, FiresOnCloseWhenThePeerLeavesMidAnswer) {
  auto c = std::make_unique<RawClient>(server_.port());
  ASSERT_TRUE(c->send("GET /park HTTP/1.1\r\n\r\n"));
  auto parked = routes_.parked.wait(0);
  ASSERT_NE(parked, nullptr);
  parked->start_stream(200, Headers(), "text/event-stream");
  EXPECT_TRUE(parked->write("data: 1\n\n"));
  c.reset();  // the peer goes away
  ASSERT_TRUE(routes_.parked.wait_closed(1));
  EXPECT_TRUE(parked->closed());
  EXPECT_FALSE(parked->write("data: 2\n\n"));
  std::atomic<bool> late{false};
  parked->on_close([&] { late = true; });  // already closed: runs at once
  EXPECT_TRUE(late.load());
  EXPECT_TRUE(test::eventually([&] { return server_.server().connections() == 0; }, 5));
}

TEST_F(HttpBehaviour, AnswersA500WhenTheHandlerDropsTheRequest) {
  for (const char* path : {"/drop", "/throw"}) {
    RawClient c(server_.port());
    ASSERT_TRUE(c.send(std::string("GET ") + path + " HTTP/1.1\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->status, 500) << path;
    EXPECT_NE(r->body.find("\"status\":500"), std::string::npos) << r->body;  // shaped by the renderer
    EXPECT_EQ(r->header("Connection"), "close");
    EXPECT_TRUE(c.wait_closed(5)) << path;
  }
}

TEST_F(HttpBehaviour, StopClosesOpenStreamsAndReturns) {
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<RawClient>(server_.port()));
    ASSERT_TRUE(clients.back()->send("GET /park HTTP/1.1\r\n\r\n"));
    auto parked = routes_.parked.wait(static_cast<size_t>(i));
    ASSERT_NE(parked, nullptr);
    parked->start_stream(200, Headers(), "text/event-stream");
  }
  ASSERT_TRUE(server_.stop_and_join(10)) << "run() did not return after stop()";
  EXPECT_TRUE(routes_.parked.wait_closed(3, 1));
  for (auto& c : clients) EXPECT_TRUE(c->wait_closed(5));
  server_.server().stop();  // a second stop is harmless
}

TEST_F(HttpBehaviour, RefusesASecondServerOnTheSamePort) {
  Server other(test::small_limits(), test::echo_handler(), nullptr);
  EXPECT_FALSE(other.bind("127.0.0.1", server_.port()));
}

class HttpTimeouts : public HttpBehaviour {
 protected:
  static ServerLimits limits() {
    ServerLimits l = test::small_limits();
    l.header_timeout_s = 1;
    l.body_timeout_s = 1;
    l.idle_timeout_s = 1;
    l.write_timeout_s = 1;
    return l;
  }
  HttpTimeouts() : HttpBehaviour(limits()) {}
};

TEST_F(HttpTimeouts, AnswersSlowHeadersWith408) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nX-Slow: "));
  // One byte every 200 ms, well past the 1 s header timeout, until the server answers.
  for (int i = 0; i < 50 && !c.readable_within(0.2); ++i) {
    if (!c.send("a")) break;
  }
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  EXPECT_NE(r->body.find("timed out reading the request headers"), std::string::npos) << r->body;
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_TRUE(c.wait_closed(5));
}

TEST_F(HttpTimeouts, AnswersASlowBodyWith408) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
  EXPECT_NE(r->body.find("timed out reading the request body"), std::string::npos) << r->body;
  EXPECT_TRUE(c.wait_closed(5));
}

TEST_F(HttpTimeouts, ClosesAnIdleKeepAliveConnectionQuietly) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(c.read_response().has_value());
  EXPECT_TRUE(c.wait_closed(5));
  EXPECT_EQ(c.received(), "");  // no 408 for a connection between requests
}

TEST_F(HttpTimeouts, DropsAPeerThatStopsReading) {
  RawClient c(server_.port(), 10, /*receive_buffer=*/4096);
  ASSERT_TRUE(c.send("GET /big?mib=32 HTTP/1.1\r\n\r\n"));  // far more than the socket buffers hold
  ASSERT_TRUE(test::eventually([&] { return routes_.big_answers.load() == 1; }, 5));
  EXPECT_TRUE(test::eventually([&] { return server_.server().connections() == 0; }, 10));
  EXPECT_TRUE(c.wait_closed(10));
}

TEST(HttpBackpressure, DropsAStreamWhoseReaderFallsBehind) {
  ServerLimits limits = test::small_limits();
  limits.max_buffered_output = 1 << 20;
  Routes routes;
  TestServer server(limits, routes.handler());
  RawClient c(server.port(), 10, /*receive_buffer=*/4096);
  ASSERT_TRUE(c.send("GET /flood HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(test::eventually([&] { return routes.flood_refused.load(); }, 10));
  EXPECT_TRUE(test::eventually([&] { return server.server().connections() == 0; }, 10));
}

TEST(HttpConnectionCap, RefusesConnectionsOverTheCapWith503) {
  ServerLimits limits = test::small_limits();
  limits.max_connections = 4;
  TestServer server(limits, test::echo_handler());
  std::vector<std::unique_ptr<RawClient>> open;
  for (int i = 0; i < 4; ++i) {
    open.push_back(std::make_unique<RawClient>(server.port()));
    ASSERT_TRUE(open.back()->send("GET /x HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(open.back()->read_response().has_value()) << i;
  }
  EXPECT_EQ(server.server().connections(), 4u);
  RawClient fifth(server.port());
  ASSERT_TRUE(fifth.connected());
  fifth.send("GET /x HTTP/1.1\r\n\r\n");
  auto r = fifth.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("\"status\":503"), std::string::npos) << r->body;
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_TRUE(fifth.wait_closed(5));

  open.resize(2);  // two clients leave
  ASSERT_TRUE(test::eventually([&] { return server.server().connections() == 2; }, 5));
  RawClient later(server.port());
  ASSERT_TRUE(later.send("GET /after HTTP/1.1\r\n\r\n"));
  auto ok = later.read_response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->header("X-Path"), "/after");
}

TEST(HttpScale, AnswersWhileThousandsOfConnectionsHang) {
  ServerLimits limits = test::small_limits();
  limits.max_connections = 4096;
  limits.header_timeout_s = 120;
  TestServer server(limits, test::echo_handler());
  std::vector<std::unique_ptr<RawClient>> slow;
  slow.reserve(2000);
  for (int i = 0; i < 2000; ++i) {
    slow.push_back(std::make_unique<RawClient>(server.port()));
    ASSERT_TRUE(slow.back()->connected()) << i;
    ASSERT_TRUE(slow.back()->send("G")) << i;  // a request that never completes
  }
  RawClient c(server.port(), /*timeout_s=*/5);  // a generous functional deadline, not a speed assertion
  ASSERT_TRUE(c.send("GET /ping HTTP/1.1\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(test::eventually([&] { return server.server().connections() == 2001; }, 10));
}

}  // namespace
}  // namespace m3::http
