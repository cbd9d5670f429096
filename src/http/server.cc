// The listening side of the HTTP server: bind (SO_REUSEADDR only, backlog 4096), the accept loop with the
// connection cap, the pool of I/O threads running one io_context, and stop(). Per-connection work lives in
// connection.cc; this file never touches a request.
#include "http/server.h"

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <condition_variable>
#include <optional>
#include <thread>

#include "common/log.h"
#include "http/connection.h"

namespace m3::http {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr int kBacklog = 4096;

int thread_count(int configured) {
  if (configured > 0) return configured;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

// Thousands of keep-alive and SSE connections need thousands of descriptors; the soft limit is often 1024.
void raise_file_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlim_t wanted = rl.rlim_max;
  rl.rlim_cur = wanted;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) log_debug("http: could not raise RLIMIT_NOFILE to ", wanted);
}

}  // namespace

struct Server::Impl {
  Impl(ServerLimits limits, Handler handler, ErrorRenderer render_error)
      : threads(thread_count(limits.io_threads)),
        state(std::make_shared<ServerState>(std::move(limits), std::move(handler), std::move(render_error),
                                            threads)),
        acceptor(asio::make_strand(state->ioc)),
        retry(acceptor.get_executor()),
        work(asio::make_work_guard(state->ioc)) {}

  void accept() {
    acceptor.async_accept(asio::make_strand(state->ioc), [this](const error_code& ec, tcp::socket socket) {
      on_accept(ec, std::move(socket));
    });
  }

  void on_accept(const error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or buffers: pending connections wait in the backlog; try again shortly.
      log_warn("http: accept failed: ", ec.message());
      retry.expires_after(std::chrono::milliseconds(100));
      retry.async_wait([this](const error_code& e) {
        if (!e && acceptor.is_open()) accept();
      });
      return;
    }
    bool over_cap = state->open.load() >= state->limits.max_connections;
    std::make_shared<Connection>(state, std::move(socket))->start(over_cap);
    accept();
  }

  const int threads;
  std::shared_ptr<ServerState> state;  // first: the io_context must outlive the acceptor
  tcp::acceptor acceptor;              // on its own strand: stop() closes it from another thread
  asio::steady_timer retry;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool running = false;
};

Server::Server(ServerLimits limits, Handler handler, ErrorRenderer render_error) {
  raise_file_limit();
  impl_ = std::make_unique<Impl>(std::move(limits), std::move(handler), std::move(render_error));
}

Server::~Server() {
  stop();
  std::unique_lock lock(impl_->mu);
  // stop() closes every connection, so run() returns within moments; the forced stop only guards against a
  // bug.
  if (!impl_->cv.wait_for(lock, std::chrono::seconds(10), [&] { return !impl_->running; })) {
    log_warn("http: I/O threads did not finish 10 s after stop(); forcing them out");
    impl_->state->ioc.stop();
    impl_->cv.wait(lock, [&] { return !impl_->running; });
  }
}

bool Server::bind(const std::string& host, int port) {
  if (impl_->acceptor.is_open()) {
    log_error("http: already listening on port ", impl_->port, "; a second bind is refused");
    return false;
  }
  error_code ec;
  tcp::endpoint endpoint;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(port));
  } else {
    tcp::resolver resolver(impl_->state->ioc);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      log_error("http: cannot resolve '", host, "': ", ec ? ec.message() : "no address");
      return false;
    }
    endpoint = results.begin()->endpoint();
  }
  auto fail = [&](const char* what) {
    log_error("http: cannot ", what, " ", host, ":", port, ": ", ec.message());
    error_code ignored;
    impl_->acceptor.close(ignored);
    return false;
  };
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (ec) return fail("open a socket for");
  // SO_REUSEADDR lets a restarted server bind past TIME_WAIT; SO_REUSEPORT is deliberately not set, so a
  // second server on a port in use fails here instead of silently sharing it.
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) return fail("set SO_REUSEADDR on");
  impl_->acceptor.bind(endpoint, ec);
  if (ec) return fail("bind");
  impl_->acceptor.listen(kBacklog, ec);
  if (ec) return fail("listen on");
  impl_->port = impl_->acceptor.local_endpoint(ec).port();
  asio::post(impl_->acceptor.get_executor(), [impl = impl_.get()] { impl->accept(); });
  return true;
}

int Server::port() const {
  return impl_->port;
}

void Server::run() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->running) return;
    impl_->running = true;
  }
  auto run_loop = [this] {
    for (;;) {
      try {
        impl_->state->ioc.run();
        return;
      } catch (const std::exception& e) {
        log_error("http: I/O thread caught: ", e.what());
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < impl_->threads; ++i) pool.emplace_back(run_loop);
  run_loop();
  for (auto& t : pool) t.join();
  {
    std::lock_guard lock(impl_->mu);
    impl_->running = false;
  }
  impl_->cv.notify_all();
}

void Server::stop() {
  impl_->state->stopping = true;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry.cancel();
  });
  for (auto& connection : impl_->state->snapshot()) connection->close();
  std::lock_guard lock(impl_->mu);
  impl_->work.reset();  // run() returns once the closes above have run and nothing else is pending
}

size_t Server::connections() const {
  return impl_->state->open.load();
}

}  // namespace m3::http
