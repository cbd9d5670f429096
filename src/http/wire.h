// Response bytes as they go on the wire: the status line and head with the framing the transport chose
// (Content-Length, chunked, close-delimited or none), chunk framing, and the fallback error body used when no
// ErrorRenderer is set or it throws. Framing headers are the transport's alone: a handler's own
// Content-Length / Transfer-Encoding / Connection fields are dropped here.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "http/message.h"

namespace m3::http {

enum class Framing {
  kLength,   // Content-Length: n
  kChunked,  // Transfer-Encoding: chunked
  kClose,    // body runs until the connection closes (HTTP/1.0 streams)
  kNone,     // 1xx / 204 / 304: no body and no length
};

struct Head {
  int status = 200;
  const Headers* headers = nullptr;
  std::string_view content_type;
  Framing framing = Framing::kLength;
  size_t content_length = 0;
  bool close = false;              // Connection: close
  bool keep_alive_http10 = false;  // Connection: keep-alive (an HTTP/1.0 peer that asked for it)
};

// "HTTP/1.1 <status> <reason>\r\n" ... "\r\n".
std::string serialize_head(const Head& head);
// True for statuses that never carry a body (1xx, 204, 304).
bool status_has_no_body(int status);
// Appends one chunk ("<hex>\r\n<data>\r\n"); an empty `data` appends nothing (it would end the body).
void append_chunk(std::string& out, std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
// True when a comma-separated field of `headers` named `name` lists `token` (case-insensitive).
bool has_token(const Headers& headers, std::string_view name, std::string_view token);
// The body of a transport refusal when the route layer gave no renderer (or it failed).
Response fallback_error(int status, const std::string& message);

}  // namespace m3::http
