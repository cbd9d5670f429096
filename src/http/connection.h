// One accepted TCP connection: a small state machine on its own strand (read a request, answer it, read the
// next; refuse and close on bad framing, limits or timeouts) plus the thread-safe entry points its Responder
// uses. Invariants: one request is answered at a time (pipelined bytes wait in the input buffer), every byte
// queued for output is written in order by one writer, and on_close fires at most once, on the strand.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/message.h"
#include "http/request_reader.h"
#include "http/server.h"
#include "http/wire.h"

namespace m3::http {

class Connection;

// What every connection of one server shares. Connections hold it by shared_ptr, so the io_context outlives
// any connection that a Responder keeps alive after the Server itself is gone.
struct ServerState {
  ServerState(ServerLimits limits, Handler handler, ErrorRenderer render_error, int threads);

  const ServerLimits limits;
  const Handler handler;
  const ErrorRenderer render_error;
  boost::asio::io_context ioc;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};  // counted connections: the over-cap refusals are not

  // The live connections, so that stop() can close each one.
  uint64_t add(const std::shared_ptr<Connection>& connection, bool counted);
  void remove(uint64_t id, bool counted);
  std::vector<std::shared_ptr<Connection>> snapshot();

 private:
  std::mutex mu_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> live_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerState> server, boost::asio::ip::tcp::socket socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers with the server and starts serving; `over_cap`: answer 503 and close without reading a request.
  void start(bool over_cap);
  // Closes at once from any thread (Server::stop), firing a pending on_close.
  void close();

  // The Responder's side, callable from any thread. `exchange` names the request being answered; calls for an
  // earlier exchange, or a second answer, are ignored.
  void send(uint64_t exchange, Response response, bool force_close);
  void start_stream(uint64_t exchange, int status, Headers headers, std::string content_type);
  bool write(uint64_t exchange, std::string data);
  void end(uint64_t exchange);
  void on_close(uint64_t exchange, std::function<void()> fn);
  bool closed() const;
  void abandon(uint64_t exchange);  // the Responder was released

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase {
    kReading,    // reading (or waiting for) the next request
    kAnswering,  // a handler owns the request; reads continue only to notice a peer that leaves
    kRefusing,   // a transport error response is queued; close once it is written
    kLingering,  // our side is shut down; discarding input until the peer closes (so it gets the response)
    kClosed,
  };
  enum class Wait { kNone, kIdle, kHead, kBody, kLinger };
  enum class Answer { kNone, kStreaming, kDone };
  struct Deadline {
    explicit Deadline(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    Clock::time_point at = Clock::time_point::max();
    uint64_t generation = 0;  // a wait whose generation is stale was superseded
    bool pending = false;
  };

  // Strand only.
  void begin_request();
  void read_some();
  void on_readable(boost::system::error_code ec);
  void parse_buffered();
  void dispatch();
  void refuse(int status, const std::string& message, const Request* request = nullptr);
  void abandon_on_strand(uint64_t exchange, const std::string& why);
  Response render(int status, const std::string& message, const Request& request) const;
  void set_read_deadline(Wait wait, double seconds);
  void arm(Deadline& d, Clock::time_point at, void (Connection::*fire)());
  void on_deadline(Deadline& d, uint64_t generation, void (Connection::*fire)(),
                   const boost::system::error_code& ec);
  void on_read_deadline();
  void on_write_deadline();
  void flush();
  void write_some();
  void on_write(const boost::system::error_code& ec, size_t n);
  void on_drained();
  void linger();
  void close_now();

  // Any thread, with mu_ held.
  void queue_locked(std::string_view bytes);
  void schedule_flush_locked();

  std::shared_ptr<ServerState> server_;
  const ServerLimits& limits_;
  boost::asio::ip::tcp::socket socket_;  // its executor is this connection's strand
  Deadline read_deadline_;
  Deadline write_deadline_;

  // Strand only.
  Phase phase_ = Phase::kReading;
  Wait wait_ = Wait::kNone;
  boost::beast::flat_buffer in_;
  RequestReader reader_;
  bool reading_ = false;
  bool writing_ = false;
  bool peer_eof_ = false;
  std::string inflight_;  // bytes handed to the socket, written up to inflight_sent_
  size_t inflight_sent_ = 0;
  Request current_;  // the request being answered, without its body (for a 500 if the handler drops it)
  std::string remote_addr_;
  uint64_t id_ = 0;
  bool registered_ = false;
  bool counted_ = false;

  // Shared with the Responder, under mu_.
  mutable std::mutex mu_;
  std::string out_;       // queued, not yet handed to the socket
  size_t out_total_ = 0;  // out_ plus the unwritten part of inflight_
  bool flush_posted_ = false;
  bool gone_ = false;      // no more output is accepted: the connection is closed or being dropped
  bool closed_ = false;    // close_now ran
  uint64_t exchange_ = 0;  // the request being answered
  Answer answer_ = Answer::kDone;
  bool keep_alive_ = true;
  bool close_after_ = false;
  int version_ = 11;
  bool head_request_ = false;
  bool chunked_ = false;      // the current stream is chunk-framed
  bool stream_body_ = false;  // the current stream carries a body (not HEAD, not 204/304)
  std::function<void()> on_close_;
};

}  // namespace m3::http
