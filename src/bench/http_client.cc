// Each request is an Exchange: a chain of callbacks on its connection's strand (resolve, connect, write, read
// the head, read the body piece by piece into a fixed buffer), so thousands of them share two threads.
// Beast's tcp_stream timers give the connect and inactivity timeouts. A connection goes back to its host's
// idle list only after a complete keep-alive response with no extra bytes behind it.
#include "bench/http_client.h"

#include <sys/resource.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdint>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace m3::bench {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = beast::error_code;

namespace {

// Bytes handed to on_body per read at most. Small: SSE chunks are small and 4,096 streams each hold one.
constexpr size_t kBodyPiece = 8192;

struct Url {
  std::string host, port, authority, target;
  std::string error;  // why the URL cannot be used
};

Url parse_url(const std::string& url) {
  Url u;
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    u.error = "https is not supported by m3 bench serve (" + url + "): use an http:// URL";
    return u;
  }
  if (url.rfind(scheme, 0) != 0) {
    u.error = "'" + url + "' is not an http:// URL";
    return u;
  }
  const size_t slash = url.find('/', scheme.size());
  u.authority = url.substr(scheme.size(), slash == std::string::npos ? slash : slash - scheme.size());
  u.target = slash == std::string::npos ? "/" : url.substr(slash);
  std::string port;
  if (!u.authority.empty() && u.authority.front() == '[') {  // [v6 address]:port
    const size_t close = u.authority.find(']');
    if (close != std::string::npos) {
      u.host = u.authority.substr(1, close - 1);
      port = u.authority.substr(close + 1);
    }
  } else {
    const size_t colon = u.authority.find(':');
    u.host = u.authority.substr(0, colon);
    port = colon == std::string::npos ? "" : u.authority.substr(colon);
  }
  if (port.empty()) {
    u.port = "80";
  } else if (port.size() > 1 && port.front() == ':' &&
             port.find_first_not_of("0123456789", 1) == std::string::npos) {
    u.port = port.substr(1);
  }
  if (u.host.empty() || u.port.empty()) u.error = "'" + url + "' is not a valid http://host[:port]/path URL";
  return u;
}

// Thousands of sockets need more than the usual soft limit of 1,024 descriptors.
void raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

std::string seconds(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

// A socket and the bytes read from it but not yet parsed.
struct Connection {
  explicit Connection(net::io_context& ioc) : stream(net::make_strand(ioc)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

}  // namespace

struct HttpClient::Impl {
  explicit Impl(HttpClientOptions o) : options(o), work(ioc.get_executor()) {}

  std::unique_ptr<Connection> take_idle(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = idle.find(key);
    if (it == idle.end() || it->second.empty()) return nullptr;
    std::unique_ptr<Connection> c = std::move(it->second.back());
    it->second.pop_back();
    return c;
  }

  void put_idle(const std::string& key, std::unique_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu);
    idle[key].push_back(std::move(c));
  }

  const HttpClientOptions options;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::mutex mu;
  std::map<std::string, std::vector<std::unique_ptr<Connection>>> idle;  // by host:port; before ioc dies
  std::vector<std::thread> threads;
};

namespace {

class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(HttpClient::Impl& client, Url url, std::string url_text, HttpRequest req, HttpCallbacks cb)
      : client_(client), url_(std::move(url)), url_text_(std::move(url_text)), cb_(std::move(cb)) {
    request_.version(11);
    request_.method_string(req.method);
    request_.target(url_.target);
    request_.set(http::field::host, url_.authority);
    for (const auto& [name, value] : req.headers) request_.insert(name, value);
    request_.body() = std::move(req.body);
    request_.prepare_payload();
  }

  void start() {
    conn_ = client_.take_idle(key());
    reused_ = conn_ != nullptr;
    if (!conn_) return resolve();
    // Onto the connection's strand: a timer handler of its previous exchange may still be pending there.
    net::post(conn_->stream.get_executor(), [self = shared_from_this()] { self->write(); });
  }

 private:
  std::string key() const { return url_.host + ":" + url_.port; }

  void resolve() {
    conn_ = std::make_unique<Connection>(client_.ioc);
    resolver_.emplace(conn_->stream.get_executor());
    resolver_->async_resolve(url_.host, url_.port,
                             [self = shared_from_this()](error_code ec, tcp::resolver::results_type r) {
                               self->on_resolved(ec, r);
                             });
  }

  void on_resolved(error_code ec, const tcp::resolver::results_type& endpoints) {
    if (ec) return finish("cannot resolve the host of " + url_text_ + ": " + ec.message());
    conn_->stream.expires_after(client_.options.connect_timeout);
    conn_->stream.async_connect(endpoints, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
      self->on_connected(ec);
    });
  }

  void on_connected(error_code ec) {
    if (ec == beast::error::timeout)
      return finish("timed out connecting to " + url_text_ + " after " +
                    seconds(client_.options.connect_timeout));
    if (ec) return finish("cannot connect to " + url_text_ + ": " + ec.message());
    conn_->stream.socket().set_option(tcp::no_delay(true), ec);  // as aiohttp: no Nagle delay on a request
    write();
  }

  void write() {
    conn_->stream.expires_after(client_.options.inactivity_timeout);
    http::async_write(conn_->stream, request_,
                      [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); });
  }

  void on_written(error_code ec) {
    if (ec && retry_on_fresh_connection(ec)) return;
    if (ec) return fail("sending the request", ec);
    parser_.emplace();
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // a stream is as long as it takes
    conn_->stream.expires_after(client_.options.inactivity_timeout);
    http::async_read_header(conn_->stream, conn_->buffer, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
  }

  // A kept-alive connection the server closed while it sat idle fails before any byte of the answer: that is
  // no answer from the server, so the request goes again on a new connection, once.
  bool retry_on_fresh_connection(error_code ec) {
    if (!reused_ || ec == beast::error::timeout || (parser_ && parser_->got_some())) return false;
    reused_ = false;
    parser_.reset();
    resolve();
    return true;
  }

  void on_head(error_code ec) {
    if (ec && retry_on_fresh_connection(ec)) return;
    if (ec) return fail("reading the response", ec);
    const auto& res = parser_->get();
    if (cb_.on_head) {
      HttpResponseHead head{static_cast<int>(res.result_int()), std::string(res.reason()), {}};
      for (const auto& field : res) head.headers.emplace_back(field.name_string(), field.value());
      cb_.on_head(head);
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return complete();
    auto& body = parser_->get().body();
    body.data = piece_.data();
    body.size = piece_.size();
    conn_->stream.expires_after(client_.options.inactivity_timeout);
    // read_some, not read: it returns as soon as some bytes arrived, so each SSE chunk is seen on arrival.
    http::async_read_some(conn_->stream, conn_->buffer, *parser_,
                          [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (ec == http::error::need_buffer) ec = {};  // the piece is full; more follows
    const size_t n = piece_.size() - parser_->get().body().size;
    if (n > 0 && cb_.on_body) cb_.on_body(std::string_view(piece_.data(), n));
    if (ec) return fail("reading the response", ec);
    read_body();
  }

  void complete() {
    conn_->stream.expires_never();
    if (parser_->keep_alive() && conn_->buffer.size() == 0) client_.put_idle(key(), std::move(conn_));
    finish("");
  }

  void fail(const char* doing, error_code ec) {
    if (ec == beast::error::timeout)
      return finish("no data from " + url_text_ + " for " + seconds(client_.options.inactivity_timeout) +
                    " while " + doing + " (inactivity timeout)");
    if (ec == http::error::end_of_stream)
      return finish("the server at " + url_text_ + " closed the connection without answering");
    if (ec == http::error::partial_message)
      return finish("the server at " + url_text_ + " closed the connection before the response was complete");
    if (ec.category() == http::make_error_code(http::error::bad_version).category())
      return finish("malformed HTTP response from " + url_text_ + ": " + ec.message());
    finish("the connection to " + url_text_ + " broke while " + doing + ": " + ec.message());
  }

  // Ends the exchange: the connection (unless it went back to the idle list) closes with it.
  void finish(const std::string& error) {
    conn_.reset();
    HttpCallbacks cb = std::move(cb_);
    cb_ = {};
    if (cb.on_done) cb.on_done(error);
  }

  HttpClient::Impl& client_;
  const Url url_;
  const std::string url_text_;
  HttpCallbacks cb_;
  http::request<http::string_body> request_;
  std::unique_ptr<Connection> conn_;
  std::optional<tcp::resolver> resolver_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, kBodyPiece> piece_;
  bool reused_ = false;
};

}  // namespace

HttpClient::HttpClient(HttpClientOptions options) : impl_(std::make_unique<Impl>(options)) {
  raise_open_file_limit();
  for (int i = 0; i < std::max(1, options.io_threads); ++i)
    impl_->threads.emplace_back([io = &impl_->ioc] { io->run(); });
}

HttpClient::~HttpClient() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
}

void HttpClient::send(HttpRequest request, HttpCallbacks callbacks) {
  Url url = parse_url(request.url);
  if (!url.error.empty()) {
    net::post(impl_->ioc, [cb = std::move(callbacks), error = std::move(url.error)] {
      if (cb.on_done) cb.on_done(error);
    });
    return;
  }
  std::string text = std::move(request.url);
  auto exchange = std::make_shared<Exchange>(*impl_, std::move(url), std::move(text), std::move(request),
                                             std::move(callbacks));
  net::post(impl_->ioc, [exchange] { exchange->start(); });
}

HttpResult HttpClient::fetch(HttpRequest request) {
  struct State {
    HttpResult result;
    std::promise<void> done;
  };
  auto state = std::make_shared<State>();
  std::future<void> done = state->done.get_future();
  HttpCallbacks cb;
  cb.on_head = [state](const HttpResponseHead& head) { state->result.head = head; };
  cb.on_body = [state](std::string_view bytes) { state->result.body.append(bytes); };
  cb.on_done = [state](const std::string& error) {
    state->result.error = error;
    state->done.set_value();
  };
  send(std::move(request), std::move(cb));
  done.wait();
  return std::move(state->result);
}

}  // namespace m3::bench
