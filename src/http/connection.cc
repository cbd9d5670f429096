// The per-connection state machine and the Responder that feeds it. Everything that touches the socket, the
// timers or the input buffer runs on the connection's strand; a Responder (any thread) only appends bytes to
// out_ under mu_ and posts one flush to the strand, so many small SSE pieces coalesce into one socket write.
#include "http/connection.h"

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "http/decompress.h"

namespace m3::http {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr size_t kReadChunk = 16 << 10;
// While a handler answers, input is still read (to notice a peer that leaves) and kept for the next request;
// past this much the connection stops reading until the answer is done.
constexpr size_t kMaxInputWhileAnswering = 1 << 20;
// After our last response we wait this long for the peer to close, so that a close with unread input (which
// makes the kernel send RST) cannot destroy the response before the peer has read it.
constexpr double kLingerSeconds = 2.0;

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

void run_callback(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    log_error("http: on_close callback threw: ", e.what());
  } catch (...) {
    log_error("http: on_close callback threw");
  }
}

class ConnectionResponder final : public Responder {
 public:
  ConnectionResponder(std::shared_ptr<Connection> connection, uint64_t exchange)
      : connection_(std::move(connection)), exchange_(exchange) {}
  ~ConnectionResponder() override { connection_->abandon(exchange_); }

  void send(Response response) override { connection_->send(exchange_, std::move(response), false); }
  void start_stream(int status, Headers headers, std::string content_type) override {
    connection_->start_stream(exchange_, status, std::move(headers), std::move(content_type));
  }
  bool write(std::string data) override { return connection_->write(exchange_, std::move(data)); }
  void end() override { connection_->end(exchange_); }
  void on_close(std::function<void()> fn) override { connection_->on_close(exchange_, std::move(fn)); }
  bool closed() const override { return connection_->closed(); }

 private:
  std::shared_ptr<Connection> connection_;
  uint64_t exchange_;
};

}  // namespace

ServerState::ServerState(ServerLimits l, Handler h, ErrorRenderer r, int threads)
    : limits(std::move(l)), handler(std::move(h)), render_error(std::move(r)), ioc(threads) {}

uint64_t ServerState::add(const std::shared_ptr<Connection>& connection, bool counted) {
  std::lock_guard lock(mu_);
  uint64_t id = ++next_id_;
  live_.emplace(id, connection);
  if (counted) open.fetch_add(1);
  return id;
}

void ServerState::remove(uint64_t id, bool counted) {
  std::lock_guard lock(mu_);
  live_.erase(id);
  if (counted) open.fetch_sub(1);
}

std::vector<std::shared_ptr<Connection>> ServerState::snapshot() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Connection>> out;
  out.reserve(live_.size());
  for (auto& [id, weak] : live_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

Connection::Connection(std::shared_ptr<ServerState> server, asio::ip::tcp::socket socket)
    : server_(std::move(server)),
      limits_(server_->limits),
      socket_(std::move(socket)),
      read_deadline_(socket_.get_executor()),
      write_deadline_(socket_.get_executor()),
      reader_(limits_) {}

Connection::~Connection() {
  if (registered_) server_->remove(id_, counted_);
}

void Connection::start(bool over_cap) {
  counted_ = !over_cap;
  id_ = server_->add(shared_from_this(), counted_);
  registered_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this(), over_cap] {
    error_code ec;
    auto remote = self->socket_.remote_endpoint(ec);
    if (!ec) {
      auto address = remote.address();
      if (address.is_v6() && address.to_v6().is_v4_mapped()) {
        address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
      }
      self->remote_addr_ = address.to_string();
    }
    // Streamed tokens must leave at once rather than wait for Nagle's timer.
    self->socket_.set_option(asio::ip::tcp::no_delay(true), ec);
    self->socket_.non_blocking(true, ec);
    if (self->server_->stopping) return self->close_now();
    if (over_cap) {
      return self->refuse(
          503, "too many open connections (at most " + std::to_string(self->limits_.max_connections) + ")");
    }
    self->begin_request();
  });
  // stop() may have taken its snapshot of live connections just before this one registered.
  if (server_->stopping) close();
}

void Connection::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

// ---- reading ----

void Connection::begin_request() {
  if (server_->stopping) return close_now();
  phase_ = Phase::kReading;
  reader_.reset();
  if (in_.size() > 0) {
    set_read_deadline(Wait::kHead, limits_.header_timeout_s);
    parse_buffered();
  } else {
    in_.shrink_to_fit();  // an idle keep-alive connection should cost next to nothing
    set_read_deadline(Wait::kIdle, limits_.idle_timeout_s);
    read_some();
  }
}

// Waits for readability and then reads without blocking, rather than lending in_ to a pending read: the
// buffer stays free to consume or shrink at any time, and an idle connection holds no read buffer at all.
void Connection::read_some() {
  if (reading_ || phase_ == Phase::kClosed || phase_ == Phase::kRefusing) return;
  if (phase_ == Phase::kAnswering && in_.size() >= kMaxInputWhileAnswering) return;
  reading_ = true;
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->on_readable(ec); });
}

void Connection::on_readable(error_code ec) {
  reading_ = false;
  if (phase_ == Phase::kClosed) return;
  size_t n = 0;
  if (!ec) n = socket_.read_some(in_.prepare(kReadChunk), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) return read_some();
  if (ec) {
    // A peer that half-closes after a bad request still deserves the refusal being written.
    if (ec == asio::error::eof && phase_ == Phase::kRefusing) {
      peer_eof_ = true;
      return;
    }
    return close_now();  // gone: EOF or reset; mid-answer this fires on_close
  }
  in_.commit(n);
  switch (phase_) {
    case Phase::kLingering:
      in_.consume(in_.size());
      return read_some();
    case Phase::kRefusing:
      in_.consume(in_.size());
      return;
    case Phase::kAnswering:
      return read_some();  // the bytes stay buffered for the next (pipelined) request
    case Phase::kReading:
      if (wait_ == Wait::kIdle) set_read_deadline(Wait::kHead, limits_.header_timeout_s);
      return parse_buffered();
    case Phase::kClosed:
      return;
  }
}

void Connection::parse_buffered() {
  auto data = in_.data();
  size_t used = reader_.feed(std::string_view(static_cast<const char*>(data.data()), data.size()));
  in_.consume(used);
  switch (reader_.state()) {
    case RequestReader::State::kError:
      return refuse(reader_.error_status(), reader_.error_message());
    case RequestReader::State::kDone:
      return dispatch();
    case RequestReader::State::kBody:
      if (wait_ != Wait::kBody) {
        set_read_deadline(Wait::kBody, limits_.body_timeout_s);
        if (reader_.expects_continue()) {
          std::lock_guard lock(mu_);
          queue_locked("HTTP/1.1 100 Continue\r\n\r\n");
        }
      }
      break;
    case RequestReader::State::kHead:
      break;
  }
  read_some();
}

void Connection::dispatch() {
  Request request = reader_.take_request();
  request.remote_addr = remote_addr_;
  DecodeOutcome decoded = decode_request_body(request, limits_.max_body_bytes, limits_.decompress);
  if (decoded.status != 0) return refuse(decoded.status, decoded.message, &request);
  set_read_deadline(Wait::kNone, 0);
  phase_ = Phase::kAnswering;
  current_.method = request.method;
  current_.target = request.target;
  current_.path = request.path;
  current_.query = request.query;
  current_.version = request.version;
  current_.headers = request.headers;
  current_.remote_addr = request.remote_addr;
  uint64_t exchange;
  {
    std::lock_guard lock(mu_);
    exchange = ++exchange_;
    answer_ = Answer::kNone;
    on_close_ = nullptr;
    version_ = request.version;
    head_request_ = request.method == "HEAD";
    keep_alive_ = request.version >= 11 ? !has_token(request.headers, "Connection", "close")
                                        : has_token(request.headers, "Connection", "keep-alive");
    // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message means its framing cannot be trusted.
    if (request.version < 11 && request.headers.has("Transfer-Encoding")) keep_alive_ = false;
    close_after_ = false;
  }
  auto responder = std::make_shared<ConnectionResponder>(shared_from_this(), exchange);
  try {
    server_->handler(std::move(request), responder);
  } catch (const std::exception& e) {
    log_error("http: request handler threw: ", e.what());
    abandon_on_strand(exchange, "internal error in the request handler");
  } catch (...) {
    log_error("http: request handler threw");
    abandon_on_strand(exchange, "internal error in the request handler");
  }
  responder.reset();
  read_some();  // keeps watching the socket so a peer that leaves is noticed while the answer is pending
}

Response Connection::render(int status, const std::string& message, const Request& request) const {
  if (server_->render_error) {
    try {
      return server_->render_error(status, message, request);
    } catch (const std::exception& e) {
      log_error("http: error renderer threw: ", e.what());
    } catch (...) {
      log_error("http: error renderer threw");
    }
  }
  return fallback_error(status, message);
}

void Connection::refuse(int status, const std::string& message, const Request* request) {
  log_debug("http: ", status, " ", message, " (", remote_addr_, ")");
  Response r = render(status, message, request ? *request : reader_.request());
  if (status == 503) r.headers.set("Retry-After", "1");
  phase_ = Phase::kRefusing;
  set_read_deadline(Wait::kNone, 0);
  Head head{r.status, &r.headers, r.content_type, Framing::kLength, r.body.size(), true, false};
  std::lock_guard lock(mu_);
  answer_ = Answer::kDone;
  close_after_ = true;
  queue_locked(serialize_head(head));
  queue_locked(r.body);
}

// ---- timers ----

void Connection::set_read_deadline(Wait wait, double seconds) {
  wait_ = wait;
  if (wait == Wait::kNone || seconds <= 0) {
    read_deadline_.at = Clock::time_point::max();  // a pending wait sees this and stops
    return;
  }
  arm(read_deadline_, Clock::now() + to_duration(seconds), &Connection::on_read_deadline);
}

void Connection::arm(Deadline& d, Clock::time_point at, void (Connection::*fire)()) {
  d.at = at;
  // A pending wait that expires first re-arms itself for the later deadline when it fires.
  if (d.pending && d.timer.expiry() <= at) return;
  d.pending = true;
  d.timer.expires_at(at);
  d.timer.async_wait([self = shared_from_this(), &d, generation = ++d.generation,
                      fire](const error_code& ec) { self->on_deadline(d, generation, fire, ec); });
}

void Connection::on_deadline(Deadline& d, uint64_t generation, void (Connection::*fire)(),
                             const error_code& ec) {
  if (generation != d.generation) return;
  d.pending = false;
  if (ec || phase_ == Phase::kClosed || d.at == Clock::time_point::max()) return;
  if (Clock::now() < d.at) return arm(d, d.at, fire);
  d.at = Clock::time_point::max();
  (this->*fire)();
}

void Connection::on_read_deadline() {
  switch (wait_) {
    case Wait::kIdle:
    case Wait::kLinger:
      return close_now();
    case Wait::kHead:
      return refuse(408, "timed out reading the request headers");
    case Wait::kBody:
      return refuse(408, "timed out reading the request body");
    case Wait::kNone:
      return;
  }
}

void Connection::on_write_deadline() {
  if (!writing_) return;
  log_debug("http: write made no progress for ", limits_.write_timeout_s, " s; closing (", remote_addr_, ")");
  close_now();
}

// ---- writing ----

void Connection::queue_locked(std::string_view bytes) {
  out_.append(bytes);
  out_total_ += bytes.size();
  schedule_flush_locked();
}

void Connection::schedule_flush_locked() {
  if (flush_posted_) return;
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->flush(); });
}

void Connection::flush() {
  std::unique_lock lock(mu_);
  flush_posted_ = false;
  if (phase_ == Phase::kClosed || writing_) return;  // a running write picks up out_ when it completes
  if (out_.empty()) {
    lock.unlock();
    return on_drained();
  }
  inflight_.swap(out_);
  out_.clear();
  inflight_sent_ = 0;
  lock.unlock();
  write_some();
}

void Connection::write_some() {
  writing_ = true;
  if (limits_.write_timeout_s > 0) {
    arm(write_deadline_, Clock::now() + to_duration(limits_.write_timeout_s), &Connection::on_write_deadline);
  }
  socket_.async_write_some(
      asio::buffer(inflight_.data() + inflight_sent_, inflight_.size() - inflight_sent_),
      [self = shared_from_this()](const error_code& ec, size_t n) { self->on_write(ec, n); });
}

void Connection::on_write(const error_code& ec, size_t n) {
  writing_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) return close_now();
  inflight_sent_ += n;
  {
    std::lock_guard lock(mu_);
    out_total_ -= n;
  }
  if (inflight_sent_ < inflight_.size()) return write_some();  // progress: the write deadline restarts
  write_deadline_.at = Clock::time_point::max();
  if (inflight_.capacity() > (1u << 20)) std::string().swap(inflight_);
  inflight_.clear();
  flush();
}

// Nothing queued and nothing in flight: the answer (if complete) is on the wire.
void Connection::on_drained() {
  if (phase_ == Phase::kRefusing) return linger();
  if (phase_ != Phase::kAnswering) return;
  bool done, close;
  {
    std::lock_guard lock(mu_);
    done = answer_ == Answer::kDone;
    close = close_after_;
  }
  if (!done) return;
  if (close || server_->stopping) return linger();
  begin_request();
}

void Connection::linger() {
  phase_ = Phase::kLingering;
  {
    std::lock_guard lock(mu_);
    gone_ = true;
  }
  error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (ec || peer_eof_) return close_now();
  in_.consume(in_.size());
  set_read_deadline(Wait::kLinger, kLingerSeconds);
  read_some();
}

void Connection::close_now() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  std::function<void()> fn;
  {
    std::lock_guard lock(mu_);
    gone_ = true;
    closed_ = true;
    if (answer_ != Answer::kDone) fn = std::move(on_close_);
    on_close_ = nullptr;
    out_.clear();
  }
  error_code ec;
  socket_.close(ec);
  read_deadline_.timer.cancel();
  write_deadline_.timer.cancel();
  if (registered_) server_->remove(id_, counted_);
  registered_ = false;
  if (fn) run_callback(fn);
}

// ---- the Responder's side (any thread) ----

void Connection::send(uint64_t exchange, Response r, bool force_close) {
  std::lock_guard lock(mu_);
  if (exchange != exchange_ || answer_ != Answer::kNone) return;
  answer_ = Answer::kDone;
  if (gone_) return;
  bool close =
      force_close || !keep_alive_ || has_token(r.headers, "Connection", "close") || server_->stopping.load();
  close_after_ = close;
  bool no_body = status_has_no_body(r.status);
  Head head{r.status,      &r.headers, r.content_type,         no_body ? Framing::kNone : Framing::kLength,
            r.body.size(), close,      version_ < 11 && !close};
  queue_locked(serialize_head(head));
  if (!head_request_ && !no_body) queue_locked(r.body);
}

void Connection::start_stream(uint64_t exchange, int status, Headers headers, std::string content_type) {
  std::lock_guard lock(mu_);
  if (exchange != exchange_ || answer_ != Answer::kNone) return;
  answer_ = Answer::kStreaming;
  if (gone_) return;
  bool no_body = status_has_no_body(status);
  // HTTP/1.0 has no chunked coding: the body runs until the connection closes.
  chunked_ = version_ >= 11 && !no_body;
  stream_body_ = !head_request_ && !no_body;
  bool close =
      version_ < 11 || !keep_alive_ || has_token(headers, "Connection", "close") || server_->stopping.load();
  close_after_ = close;
  Framing framing = no_body ? Framing::kNone : chunked_ ? Framing::kChunked : Framing::kClose;
  Head head{status, &headers, content_type, framing, 0, close, false};
  queue_locked(serialize_head(head));
}

bool Connection::write(uint64_t exchange, std::string data) {
  std::lock_guard lock(mu_);
  if (exchange != exchange_ || answer_ != Answer::kStreaming || gone_) return false;
  if (!stream_body_ || data.empty()) return true;
  size_t before = out_.size();
  if (chunked_) {
    append_chunk(out_, data);
  } else {
    out_.append(data);
  }
  out_total_ += out_.size() - before;
  if (out_total_ > limits_.max_buffered_output) {
    // The peer is not reading: drop it rather than hold an unbounded backlog (close_now fires on_close).
    log_warn("http: ", out_total_, " bytes queued for a peer that does not read; dropping it (", remote_addr_,
             ")");
    gone_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
    return false;
  }
  schedule_flush_locked();
  return true;
}

void Connection::end(uint64_t exchange) {
  std::lock_guard lock(mu_);
  if (exchange != exchange_ || answer_ != Answer::kStreaming) return;
  answer_ = Answer::kDone;
  if (gone_) return;
  if (chunked_ && stream_body_) {
    queue_locked(kLastChunk);
  } else {
    schedule_flush_locked();  // a close-delimited body ends when the drain closes the connection
  }
}

void Connection::on_close(uint64_t exchange, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (exchange != exchange_ || answer_ == Answer::kDone) return;  // answered: it will never fire
    if (!closed_) {
      on_close_ = std::move(fn);
      return;
    }
  }
  if (fn) run_callback(fn);
}

bool Connection::closed() const {
  std::lock_guard lock(mu_);
  return gone_;
}

void Connection::abandon(uint64_t exchange) {
  {
    std::lock_guard lock(mu_);
    if (exchange != exchange_ || answer_ == Answer::kDone || gone_) return;
  }
  asio::post(socket_.get_executor(), [self = shared_from_this(), exchange] {
    self->abandon_on_strand(exchange, "the request handler returned no response");
  });
}

void Connection::abandon_on_strand(uint64_t exchange, const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (exchange != exchange_ || answer_ == Answer::kDone || gone_) return;
    if (answer_ == Answer::kStreaming) {
      // No last chunk: the peer must see a truncated body, not a complete one. Close once the rest is out.
      answer_ = Answer::kDone;
      close_after_ = true;
      schedule_flush_locked();
      return;
    }
  }
  log_error("http: ", why, " for ", current_.method, " ", current_.path);
  send(exchange, render(500, why, current_), true);
}

}  // namespace m3::http
