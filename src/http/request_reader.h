// Incremental, socket-free reader of one HTTP/1.x request on Beast's basic_parser, with the strict RFC 9112
// framing rules Beast alone does not enforce (one Content-Length field, never with Transfer-Encoding, only
// the chunked transfer coding) and ServerLimits mapped to 400 / 413 / 414 / 431 / 501. The caller owns the
// bytes: it feeds what it has, drops what was consumed and keeps the rest for the next (pipelined) request.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "http/message.h"
#include "http/server.h"

namespace m3::http {

class RequestReader {
 public:
  enum class State {
    kHead,   // reading the request line and header fields
    kBody,   // the head is complete, the body is still arriving
    kDone,   // a whole request is ready (take_request)
    kError,  // refused: error_status() / error_message(); the connection must answer and close
  };

  explicit RequestReader(const ServerLimits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;  // the Beast parser points into request_
  RequestReader& operator=(const RequestReader&) = delete;

  // Consumes as much of `input` as belongs to the current request and returns how many bytes that was. Bytes
  // after the end of the request are never consumed.
  size_t feed(std::string_view input);
  // Starts a new request (after kDone was taken, or to drop a refused one).
  void reset();

  State state() const { return state_; }
  bool started() const { return started_; }  // a byte of this request (other than leading CRLFs) arrived
  bool expects_continue() const;             // "Expect: 100-continue" with a body still to come
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // What was parsed so far: method / target / path once the request line is in, fields as they come.
  const Request& request() const { return request_; }
  Request take_request();

 private:
  class Parser;
  void fail(int status, std::string message);
  bool target_too_long(std::string_view input) const;

  const ServerLimits& limits_;
  Request request_;
  std::unique_ptr<Parser> parser_;
  State state_ = State::kHead;
  bool started_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// The refusal texts shared by the reader and the connection.
std::string body_too_large_message(size_t max_body_bytes);
std::string target_too_long_message(size_t max_target_bytes);
std::string head_too_large_message(const ServerLimits& limits);

}  // namespace m3::http
