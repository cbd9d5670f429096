// http(s) media URLs against a local HTTP server on 127.0.0.1 (allowed by --allowed-media-domains): the body
// of a 200, redirects followed only to allowed hosts, the byte limit, error statuses and a server that never
// answers, each a kInvalidArgument a client can act on. No network beyond the loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/error.h"
#include "media/media_url.h"

namespace {

using m3::media::MediaPolicy;

// Answers each connection by path: /cat.png (200, 3000 bytes), /big (200, 1 MB), /to-cat (302 to /cat.png),
// /to-evil (302 to an unlisted host), /loop (302 to itself), /missing (404), /silent (reads, never answers).
class LocalServer {
 public:
  LocalServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { serve(); });
  }
  ~LocalServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  static std::string cat() {
    std::string b(3000, '\0');
    for (size_t i = 0; i < b.size(); ++i) b[i] = char(i * 31 + 7);
    return b;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, size_t(n));
      }
      const std::string path = req.substr(4, req.find(' ', 4) - 4);
      std::string head, body;
      if (path == "/cat.png") {
        body = cat();
        head = "HTTP/1.1 200 OK";
      } else if (path == "/big") {
        body.assign(1 << 20, 'x');
        head = "HTTP/1.1 200 OK";
      } else if (path == "/to-cat") {
        head = "HTTP/1.1 302 Found\r\nLocation: /cat.png";
      } else if (path == "/to-evil") {
        head = "HTTP/1.1 302 Found\r\nLocation: http://evil.example/cat.png";
      } else if (path == "/loop") {
        head = "HTTP/1.1 302 Found\r\nLocation: /loop";
      } else if (path == "/silent") {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        close(c);
        continue;
      } else {
        head = "HTTP/1.1 404 Not Found";
      }
      const std::string out = head + "\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\nConnection: close\r\n\r\n" + body;
      for (size_t at = 0; at < out.size();) {
        const ssize_t n = write(c, out.data() + at, out.size() - at);
        if (n <= 0) break;
        at += size_t(n);
      }
      close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string error_of(const std::string& url, const MediaPolicy& policy) {
  try {
    m3::media::load_media_url(url, policy);
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  return "(no error)";
}

TEST(MediaFetch, AllowedHostsAreFetchedWithLimits) {
  LocalServer server;
  MediaPolicy policy;
  policy.allowed_media_domains = {"127.0.0.1"};
  policy.max_bytes = 100000;
  policy.fetch_timeout_ms = 500;
  const std::vector<uint8_t> got = m3::media::load_media_url(server.url("/cat.png"), policy);
  const std::string want = LocalServer::cat();
  EXPECT_EQ(std::string(got.begin(), got.end()), want);
  const std::vector<uint8_t> redirected = m3::media::load_media_url(server.url("/to-cat"), policy);
  EXPECT_EQ(std::string(redirected.begin(), redirected.end()), want);

  EXPECT_NE(error_of(server.url("/to-evil"), policy).find("is not in --allowed-media-domains"),
            std::string::npos);
  EXPECT_NE(error_of(server.url("/loop"), policy).find("redirects"), std::string::npos);
  EXPECT_NE(error_of(server.url("/big"), policy).find("larger than the limit of 100000 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(server.url("/missing"), policy).find("HTTP 404"), std::string::npos);
  EXPECT_NE(error_of(server.url("/silent"), policy).find("took longer than"), std::string::npos);
  // Nothing listens on port 1.
  EXPECT_NE(error_of("http://127.0.0.1:1/cat.png", policy).find("cannot fetch"), std::string::npos);
}

}  // namespace
