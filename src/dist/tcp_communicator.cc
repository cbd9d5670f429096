// A star of TCP connections around rank 0: broadcast = rank 0 writes to each worker; all-gather = workers
// send their part to rank 0, which returns the concatenation. Blocking sockets with poll() deadlines.
#include "dist/tcp_communicator.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace m3::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::pair<std::string, std::string> split_addr(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    fail(ErrorKind::kInvalidArgument, "--dist-init-addr '" + addr + "' is not host:port");
  return {addr.substr(0, colon), addr.substr(colon + 1)};
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const std::string& addr, int rank, int size, double timeout_s)
      : rank_(rank), size_(size), timeout_s_(timeout_s), addr_(addr) {
    if (rank == 0)
      listen_and_accept();
    else
      connect_to_root();
    processes_ = gather_processes(*this);
  }
  ~TcpCommunicator() override {
    for (int fd : peers_)
      if (fd >= 0) close(fd);
    if (root_ >= 0) close(root_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<PeerProcess> processes() const override { return processes_; }

  void broadcast(void* data, size_t bytes, int root, bool idle) override {
    M3_CHECK(root == 0, "the TCP communicator broadcasts from rank 0 only");
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) send_all(peers_[r], data, bytes, r);
    } else {
      recv_all(root_, data, bytes, 0, idle);
    }
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    char* out = static_cast<char*>(recv);
    if (rank_ == 0) {
      std::memmove(out, send, bytes);
      for (int r = 1; r < size_; ++r) recv_all(peers_[r], out + r * bytes, bytes, r, false);
      for (int r = 1; r < size_; ++r) send_all(peers_[r], out, bytes * size_, r);
    } else {
      send_all(root_, send, bytes, 0);
      recv_all(root_, out, bytes * size_, 0, false);
    }
  }

  [[noreturn]] void abort(const std::string& why) override {
    log_error(describe(), ": ", why);
    std::_Exit(
        1);  // the supervisor (or the launcher) ends the other ranks; workers also see the socket close
  }

 private:
  [[noreturn]] void lost(int peer, const std::string& what) {
    const std::string why = "the connection to rank " + std::to_string(peer) + " " + what;
    if (rank_ != 0 && peer == 0) {  // rank 0 ended: nothing is left to serve
      log_error(describe(), ": ", why, "; exiting");
      std::_Exit(1);
    }
    run_fault_handler(describe() + ": " + why);
    abort(why);
  }

  void wait_ready(int fd, short events, int peer, bool idle, Clock::time_point deadline) {
    for (;;) {
      pollfd p{fd, events, 0};
      const int ms =
          idle ? 1000
               : static_cast<int>(std::max<int64_t>(
                     0,
                     std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      const int n = poll(&p, 1, ms);
      if (n > 0) return;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) lost(peer, std::string("failed: ") + std::strerror(errno));
      if (!idle)
        lost(peer, "did not complete in " + std::to_string(timeout_s_) + " s (--dist-timeout): rank " +
                       std::to_string(peer) + " is dead or hung");
    }
  }

  Clock::time_point deadline() const {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  }

  void send_all(int fd, const void* data, size_t bytes, int peer) {
    const char* p = static_cast<const char*>(data);
    const auto until = deadline();
    while (bytes > 0) {
      wait_ready(fd, POLLOUT, peer, false, until);
      const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) lost(peer, std::string("closed: ") + std::strerror(errno));
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void recv_all(int fd, void* data, size_t bytes, int peer, bool idle) {
    char* p = static_cast<char*>(data);
    auto until = deadline();
    while (bytes > 0) {
      wait_ready(fd, POLLIN, peer, idle, until);
      const ssize_t n = ::recv(fd, p, bytes, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) lost(peer, n == 0 ? "closed" : std::string("failed: ") + std::strerror(errno));
      if (idle) {  // the call has begun: its remaining bytes follow at once
        idle = false;
        until = deadline();
      }
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void listen_and_accept() {
    const auto [host, port] = split_addr(addr_);
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(nullptr, port.c_str(), &hints, &res) != 0)
      fail(ErrorKind::kInvalidArgument, "--dist-init-addr '" + addr_ + "': bad port");
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, size_) != 0) {
      freeaddrinfo(res);
      close(fd);
      fail(ErrorKind::kInvalidArgument, "--dist-init-addr '" + addr_ + "': rank 0 cannot listen on port " +
                                            port + ": " + std::strerror(errno));
    }
    freeaddrinfo(res);
    peers_.assign(size_, -1);
    const auto until = deadline();
    for (int joined = 1; joined < size_;) {
      pollfd p{fd, POLLIN, 0};
      const int ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count()));
      if (poll(&p, 1, ms) <= 0) {
        close(fd);
        fail(ErrorKind::kUnavailable, "rank 0 waited " + std::to_string(timeout_s_) + " s at " + addr_ +
                                          " for " + std::to_string(size_ - joined) + " rank(s) to join");
      }
      const int c = accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      tune(c);
      int32_t r = -1;
      recv_all(c, &r, sizeof r, -1, false);
      if (r <= 0 || r >= size_ || peers_[r] >= 0) {
        close(c);
        close(fd);
        fail(ErrorKind::kInvalidArgument, "a process joined " + addr_ + " as rank " + std::to_string(r) +
                                              ", which is not a free rank of " + std::to_string(size_));
      }
      peers_[r] = c;
      ++joined;
    }
    close(fd);
  }

  void connect_to_root() {
    const auto [host, port] = split_addr(addr_);
    const auto until = deadline();
    for (;;) {
      addrinfo hints{}, *res = nullptr;
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) == 0) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        const bool ok = connect(fd, res->ai_addr, res->ai_addrlen) == 0;
        freeaddrinfo(res);
        if (ok) {
          tune(fd);
          root_ = fd;
          const int32_t r = rank_;
          send_all(root_, &r, sizeof r, 0);
          return;
        }
        close(fd);
      }
      if (Clock::now() > until)
        fail(ErrorKind::kUnavailable, "rank " + std::to_string(rank_) + " could not reach rank 0 at " +
                                          addr_ + " within " + std::to_string(timeout_s_) +
                                          " s (--dist-init-addr)");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  int rank_, size_;
  double timeout_s_;
  std::string addr_;
  std::vector<int> peers_;  // rank 0: the socket of each worker rank
  int root_ = -1;           // workers: the socket to rank 0
  std::vector<PeerProcess> processes_;
};

}  // namespace

std::shared_ptr<Communicator> join_tcp_world(const std::string& addr, int rank, int size, double timeout_s) {
  return std::make_shared<TcpCommunicator>(addr, rank, size, timeout_s);
}

}  // namespace m3::dist
