// The listening socket: a burst of connections is queued by the kernel even before the server accepts any
// (the old cpp-httplib server listened with a backlog of 5 and left clients in SYN back-off for minutes), and
// a second server cannot take a port that is in use.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "server/api_server.h"

namespace m3 {
namespace {

ServerOptions local_options(int port) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.served_model_names = {"m"};
  return o;
}

// Starts a non-blocking connect to 127.0.0.1:port; returns the socket.
int start_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  return fd;
}

TEST(Listen, ABurstOfConnectionsIsQueuedBeforeAnyIsAccepted) {
  ApiServer server(local_options(0));
  ASSERT_TRUE(server.bind());  // bound and listening, but nothing accepts: only the kernel's queue holds them
  constexpr int kClients = 200;
  std::vector<int> fds;
  for (int i = 0; i < kClients; ++i) fds.push_back(start_connect(server.port()));
  // A handshake completes only when the accept queue has room; a dropped SYN is retried after 1 s, 3 s, ...
  int connected = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
  std::vector<bool> done(kClients, false);
  while (connected < kClients && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < kClients; ++i) {
      if (done[i]) continue;
      pollfd p{fds[i], POLLOUT, 0};
      if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
        EXPECT_EQ(err, 0) << "client " << i;
        done[i] = true;
        ++connected;
      }
    }
  }
  for (int fd : fds) close(fd);
  EXPECT_EQ(connected, kClients) << "handshakes completed within 0.7 s with no accept() running";
}

TEST(Listen, APortInUseIsRefused) {
  ApiServer first(local_options(0));
  ASSERT_TRUE(first.bind());
  ApiServer second(local_options(first.port()));
  EXPECT_FALSE(second.bind()) << "two servers bound port " << first.port();
}

}  // namespace
}  // namespace m3
