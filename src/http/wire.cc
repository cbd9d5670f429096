// Serialization of response heads and chunks. The Date header is formatted once per second per thread because
// every response carries it and strftime is not free at tens of thousands of responses a second.
#include "http/wire.h"

#include <boost/beast/http/status.hpp>
#include <ctime>

#include "common/json_escape.h"

namespace m3::http {

namespace {

const std::string& http_date() {
  thread_local std::time_t cached_second = 0;
  thread_local std::string cached;
  std::time_t now = std::time(nullptr);
  if (now != cached_second) {
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[64];
    size_t n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    cached.assign(buf, n);
    cached_second = now;
  }
  return cached;
}

bool is_framing_field(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection");
}

// A CR or LF in a handler's field would let it write a second response; such a field is dropped.
bool is_safe(std::string_view s) {
  return s.find_first_of("\r\n") == std::string_view::npos;
}

std::string_view reason(int status) {
  auto r = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  std::string_view text(r.data(), r.size());
  return text == "<unknown-status>" ? std::string_view("Unknown") : text;
}

}  // namespace

bool status_has_no_body(int status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

std::string serialize_head(const Head& head) {
  std::string out;
  out.reserve(256);
  out += "HTTP/1.1 ";
  out += std::to_string(head.status);
  out += ' ';
  out += reason(head.status);
  out += "\r\n";
  bool has_date = false, has_server = false, has_type = false;
  if (head.headers) {
    for (const auto& [name, value] : head.headers->fields()) {
      if (is_framing_field(name) || !is_safe(name) || !is_safe(value) || name.empty()) continue;
      if (iequals(name, "Content-Type")) {
        if (!head.content_type.empty()) continue;  // the Response's content_type wins
        has_type = true;
      }
      has_date |= iequals(name, "Date");
      has_server |= iequals(name, "Server");
      out += name;
      out += ": ";
      out += value;
      out += "\r\n";
    }
  }
  if (!has_date) out += "Date: " + http_date() + "\r\n";
  if (!has_server) out += "Server: m3serve\r\n";
  if (!has_type && !head.content_type.empty() && head.framing != Framing::kNone &&
      is_safe(head.content_type)) {
    out += "Content-Type: ";
    out += head.content_type;
    out += "\r\n";
  }
  switch (head.framing) {
    case Framing::kLength:
      out += "Content-Length: " + std::to_string(head.content_length) + "\r\n";
      break;
    case Framing::kChunked:
      out += "Transfer-Encoding: chunked\r\n";
      break;
    case Framing::kClose:
    case Framing::kNone:
      break;
  }
  if (head.close) {
    out += "Connection: close\r\n";
  } else if (head.keep_alive_http10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  char size[24];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out += "\r\n";
}

bool has_token(const Headers& headers, std::string_view name, std::string_view token) {
  for (const auto& [k, v] : headers.fields()) {
    if (!iequals(k, name)) continue;
    std::string_view rest = v;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      if (iequals(trim_ows(rest.substr(0, comma)), token)) return true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return false;
}

Response fallback_error(int status, const std::string& message) {
  Response r;
  r.status = status;
  std::string body = "{\"error\":{\"message\":\"";
  append_json_escaped(body, message);
  body += "\",\"type\":\"";
  body += status >= 500 ? "server_error" : "invalid_request_error";
  body += "\",\"code\":" + std::to_string(status) + "}}";
  r.set_content(std::move(body), "application/json");
  return r;
}

}  // namespace m3::http
