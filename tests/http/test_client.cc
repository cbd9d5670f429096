// The raw-socket client and the background TestServer used by the http tests. The client parses responses
// with its own small strict parser (status line, fields, Content-Length / chunked / close-delimited bodies),
// so a framing bug in the server shows up as a parse failure here.
#include "test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "common/json_escape.h"

namespace m3::http::test {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

}  // namespace

std::string ParsedResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return "";
}

bool ParsedResponse::has_header(std::string_view name) const {
  return header_count(name) > 0;
}

size_t ParsedResponse::header_count(std::string_view name) const {
  size_t n = 0;
  for (const auto& [k, v] : headers) n += iequals(k, name) ? 1 : 0;
  return n;
}

RawClient::RawClient(int port, double timeout_s, int receive_buffer) : timeout_s_(timeout_s) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  // A send that cannot make progress fails instead of blocking the test forever.
  timeval tv{static_cast<time_t>(timeout_s), 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RawClient::~RawClient() {
  close();
}

void RawClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawClient::send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool RawClient::readable_within(double timeout_s) {
  if (!buffer_.empty() || eof_) return true;
  pollfd p{fd_, POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
  return rc > 0;
}

bool RawClient::receive_some(double timeout_s) {
  if (eof_ || fd_ < 0) return false;
  if (timeout_s <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(timeout_s * 1000) + 1);
  if (rc <= 0) return false;
  char buf[65536];
  ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) {
    eof_ = true;  // EOF, or a reset: either way the server is gone
    return false;
  }
  buffer_.append(buf, static_cast<size_t>(n));
  return true;
}

bool RawClient::wait_closed(double timeout_s) {
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (!eof_) {
    double left = seconds_left(deadline);
    if (left <= 0) return false;
    receive_some(left);
  }
  return true;
}

std::optional<ParsedResponse> RawClient::read_response(bool head_request, bool keep_interim) {
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  auto need = [&](size_t bytes) {
    while (buffer_.size() < bytes) {
      if (!receive_some(seconds_left(deadline))) return false;
    }
    return true;
  };
  auto find = [&](std::string_view what, size_t from) -> size_t {
    while (true) {
      size_t at = buffer_.find(what, from);
      if (at != std::string::npos) return at;
      if (!receive_some(seconds_left(deadline))) return std::string::npos;
    }
  };
  while (true) {
    size_t head_end = find("\r\n\r\n", 0);
    if (head_end == std::string::npos) return std::nullopt;
    ParsedResponse r;
    std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    r.status_line = head.substr(0, line_end);
    if (r.status_line.rfind("HTTP/1.", 0) != 0 || r.status_line.size() < 12) return std::nullopt;
    r.status = std::atoi(r.status_line.c_str() + 9);
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t end = head.find("\r\n", pos);
      if (end == std::string::npos) end = head.size();
      std::string line = head.substr(pos, end - pos);
      size_t colon = line.find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers.emplace_back(line.substr(0, colon), value);
      pos = end + 2;
    }
    if (r.status >= 100 && r.status < 200 && !keep_interim) continue;
    if (head_request || (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304) return r;
    if (iequals(r.header("Transfer-Encoding"), "chunked")) {
      r.chunked = true;
      while (true) {
        size_t eol = find("\r\n", 0);
        if (eol == std::string::npos) return std::nullopt;
        std::string size_line = buffer_.substr(0, eol);
        char* parse_end = nullptr;
        unsigned long size = std::strtoul(size_line.c_str(), &parse_end, 16);
        if (size_line.empty() || *parse_end != '\0') return std::nullopt;
        if (!need(eol + 2 + size + 2)) return std::nullopt;
        if (buffer_.compare(eol + 2 + size, 2, "\r\n") != 0) return std::nullopt;
        r.raw_body += buffer_.substr(0, eol + 2 + size + 2);
        r.body += buffer_.substr(eol + 2, size);
        buffer_.erase(0, eol + 2 + size + 2);
        if (size == 0) return r;
      }
    }
    if (r.has_header("Content-Length")) {
      size_t length = std::stoul(r.header("Content-Length"));
      if (!need(length)) return std::nullopt;
      r.body = buffer_.substr(0, length);
      r.raw_body = r.body;
      buffer_.erase(0, length);
      return r;
    }
    // No length: the body runs to the end of the connection (HTTP/1.0 streams).
    if (!wait_closed(seconds_left(deadline))) return std::nullopt;
    r.close_delimited = true;
    r.body = std::move(buffer_);
    r.raw_body = r.body;
    buffer_.clear();
    return r;
  }
}

TestServer::TestServer(ServerLimits limits, Handler handler, ErrorRenderer renderer)
    : server_(std::make_unique<Server>(std::move(limits), std::move(handler),
                                       renderer ? std::move(renderer) : test_renderer())) {
  if (!server_->bind("127.0.0.1", 0)) return;
  port_ = server_->port();
  thread_ = std::thread([this] { server_->run(); });
}

TestServer::~TestServer() {
  stop_and_join(30);
}

bool TestServer::stop_and_join(double timeout_s) {
  if (!thread_.joinable()) return true;
  server_->stop();
  // run() returning is observed through a flag the thread sets, so a hang is reported instead of blocking.
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread joiner([this, done] {
    thread_.join();
    done->store(true);
  });
  bool ok = eventually([&] { return done->load(); }, timeout_s);
  if (ok) {
    joiner.join();
  } else {
    joiner.detach();  // the test fails; leaking the thread beats hanging the suite
  }
  return ok;
}

ServerLimits small_limits() {
  ServerLimits l;
  l.max_body_bytes = 1 << 20;
  l.max_header_bytes = 4096;
  l.max_headers = 16;
  l.max_target_bytes = 1024;
  l.max_connections = 256;
  l.header_timeout_s = 5;
  l.body_timeout_s = 5;
  l.idle_timeout_s = 10;
  l.write_timeout_s = 10;
  l.io_threads = 2;
  return l;
}

Handler echo_handler() {
  return [](Request&& req, std::shared_ptr<Responder> responder) {
    Response r;
    r.status = 200;
    r.set_header("X-Method", req.method);
    r.set_header("X-Path", req.path);
    r.set_header("X-Query", req.query);
    r.set_header("X-Version", std::to_string(req.version));
    r.set_header("X-Body-Size", std::to_string(req.body.size()));
    r.set_header("X-Content-Encoding", req.headers.get("Content-Encoding"));
    r.set_header("X-Content-Length", req.headers.get("Content-Length"));
    r.set_header("X-Header-Count", std::to_string(req.headers.size()));
    r.set_header("X-Remote", req.remote_addr);
    r.set_content(std::move(req.body), "application/octet-stream");
    responder->send(std::move(r));
  };
}

ErrorRenderer test_renderer() {
  return [](int status, const std::string& message, const Request& req) {
    std::string body = "{\"status\":" + std::to_string(status) + ",\"message\":\"";
    append_json_escaped(body, message);
    body += "\",\"method\":\"";
    append_json_escaped(body, req.method);
    body += "\",\"path\":\"";
    append_json_escaped(body, req.path);
    body += "\"}";
    Response r;
    r.status = status;
    r.set_content(std::move(body), "application/json");
    return r;
  };
}

bool eventually(const std::function<bool()>& predicate, double timeout_s) {
  auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (!predicate()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

long vm_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atol(line.c_str() + n + 1);
  }
  return -1;
}

}  // namespace m3::http::test
