// Everything runs on the server's one thread, so the counters and the gate need no lock. Requests are read
// with Beast; replies are written by hand so a test controls exactly where a stream stops.
#include "sse_test_server.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>

// GCC 12 takes the coroutine frame allocator of Boost 1.74 (its own operator new with a sized operator
// delete) for a mismatched pair: a false positive.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace m3::bench {

namespace net = boost::asio;
namespace http = boost::beast::http;
using net::ip::tcp;

SseTestServer::SseTestServer(Handler handler, size_t hold_until_open)
    : handler_(std::move(handler)),
      hold_until_open_(hold_until_open),
      acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
      gate_(ioc_, std::chrono::seconds(20)) {
  acceptor_.listen(net::socket_base::max_listen_connections);
  net::co_spawn(ioc_, accept(), net::detached);
  thread_ = std::thread([this] { ioc_.run(); });
}

SseTestServer::~SseTestServer() {
  ioc_.stop();
  thread_.join();
}

std::string SseTestServer::url() const {
  return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
}

net::awaitable<void> SseTestServer::accept() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) continue;
    ++connections_;
    socket.set_option(tcp::no_delay(true), ec);  // each SSE event goes out at once, as a real server sends it
    net::co_spawn(ioc_, session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> SseTestServer::session(tcp::socket socket) {
  boost::beast::flat_buffer buffer;
  boost::system::error_code ec;
  auto send = [&](std::string bytes) -> net::awaitable<void> {
    co_await net::async_write(socket, net::buffer(bytes), net::redirect_error(net::use_awaitable, ec));
  };
  while (!ec) {  // one request after another while the client keeps the connection
    http::request<http::string_body> req;
    co_await http::async_read(socket, buffer, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    TestRequest r{std::string(req.method_string()), std::string(req.target()), req.body(), {}};
    for (const auto& f : req) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(f.value());
    }
    const TestReply reply = handler_(r);
    peak_ = std::max(peak_.load(), ++open_);
    if (hold_until_open_ > 0 && !released_) {
      if (open_ >= hold_until_open_)
        gate_.cancel();  // wakes every held stream
      else
        co_await gate_.async_wait(net::redirect_error(net::use_awaitable, ec));
      released_ = true;
      ec = {};
    }
    const std::string status_line = "HTTP/1.1 " + std::to_string(reply.status) + " " +
                                    std::string(http::obsolete_reason(http::status(reply.status))) + "\r\n";
    if (reply.status != 200) {
      std::string body;
      for (const std::string& c : reply.chunks) body += c;
      co_await send(status_line + "Content-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body);
    } else if (!reply.chunked) {
      co_await send(status_line + "Content-Type: text/event-stream\r\nConnection: close\r\n\r\n");
      for (const std::string& c : reply.chunks)
        if (!ec) co_await send(c);
      --open_;
      co_return;  // closing the connection ends the body
    } else {
      co_await send(status_line + "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
      for (const std::string& c : reply.chunks) {
        char size[20];
        std::snprintf(size, sizeof size, "%zx\r\n", c.size());
        if (!ec) co_await send(size + c + "\r\n");
      }
      if (reply.stall) {
        net::steady_timer never(ioc_, net::steady_timer::time_point::max());
        co_await never.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
      if (!ec && reply.complete) co_await send("0\r\n\r\n");
    }
    --open_;
    if (!reply.complete) co_return;  // the socket closes here, mid-stream
  }
}

}  // namespace m3::bench
