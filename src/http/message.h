// The HTTP/1.1 messages the transport hands to the route layer and takes back: a parsed request (framing
// already checked, body already inflated), a whole response, and the Responder through which a handler
// answers later or streams (SSE). Nothing here knows about APIs, models or Asio.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m3::http {

// Header fields in arrival order; names compare case-insensitively.
class Headers {
 public:
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  void set(const std::string& name, std::string value);  // replaces every field of that name
  void remove(std::string_view name);                    // drops every field of that name
  bool has(std::string_view name) const;
  std::string get(std::string_view name) const;  // the first such field's value, "" when absent
  size_t count(std::string_view name) const;
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

bool iequals(std::string_view a, std::string_view b);
// Strips optional whitespace (SP / HTAB, RFC 9110 5.6.3) from both ends of a field value or list item.
std::string_view trim_ows(std::string_view s);

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/messages?beta=true"
  std::string path;    // target before '?'
  std::string query;   // target after '?' ("" when none)
  int version = 11;    // 10 for HTTP/1.0, 11 for HTTP/1.1
  Headers headers;
  std::string body;  // the decoded body (Content-Encoding already undone)
  std::string remote_addr;

  std::string get_header_value(std::string_view name) const { return headers.get(name); }
  bool has_header(std::string_view name) const { return headers.has(name); }
  // The first `name=value` of the query string, percent-decoded; "" when absent.
  std::string query_param(std::string_view name) const;
};

struct Response {
  int status = 200;
  Headers headers;
  std::string content_type = "application/json";
  std::string body;

  void set_header(std::string name, std::string value) { headers.set(name, std::move(value)); }
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
};

// How a handler answers one request. Thread-safe; it may outlive the handler call (answer from any thread,
// later). Exactly one of send() or start_stream() ... end() per request; the connection reads the next
// (pipelined) request only after the answer is complete, so responses stay in order.
class Responder {
 public:
  virtual ~Responder() = default;
  // A whole response (Content-Length framed).
  virtual void send(Response response) = 0;
  // A streamed response: the head now (chunked on HTTP/1.1, close-delimited on HTTP/1.0), then pieces.
  virtual void start_stream(int status, Headers headers, std::string content_type) = 0;
  // Queues a piece of the body; never blocks. False once the connection is gone (the piece is dropped).
  virtual bool write(std::string data) = 0;
  // Ends the streamed body (last chunk, or closes an HTTP/1.0 connection).
  virtual void end() = 0;
  // `fn` runs once, on an I/O thread, if the peer goes away (or the connection fails) before the answer is
  // complete; it runs at once if that already happened. One callback; a later call replaces it.
  virtual void on_close(std::function<void()> fn) = 0;
  virtual bool closed() const = 0;
};

// Called on an I/O thread for every request that passed the transport's checks. It must not block: a handler
// with slow work hands the Responder to another thread.
using Handler = std::function<void(Request&& request, std::shared_ptr<Responder> responder)>;

// Renders a transport-level refusal (400 bad framing, 408, 413, 414, 415, 431, 503 over the connection cap)
// as the route layer wants it shaped. `request` carries what was parsed so far (method, target, path may be
// empty when the request line itself was bad). The transport sets Connection: close where it closes.
using ErrorRenderer = std::function<Response(int status, const std::string& message, const Request& request)>;

}  // namespace m3::http
