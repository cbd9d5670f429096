// The TCP star of self-spawned CUDA ranks, with its ranks as threads of this process: every rank joins at
// the rendezvous, learns the others' processes, and broadcasts and gathers exactly.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/error.h"
#include "dist/rank_protocol.h"
#include "dist/tcp_communicator.h"

namespace m3::dist {
namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(TcpCommunicator, RanksMeetBroadcastAndGather) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  constexpr int kRanks = 3;
  std::vector<std::vector<std::string>> gathered(kRanks);
  std::vector<std::vector<float>> sums(kRanks);
  std::vector<std::string> calls(kRanks);
  std::vector<size_t> processes(kRanks);
  std::vector<std::thread> threads;
  for (int r = kRanks - 1; r >= 0; --r)  // workers first: they retry until rank 0 listens
    threads.emplace_back([&, r] {
      auto comm = join_tcp_world(addr, r, kRanks, 30);
      processes[r] = comm->processes().size();
      gathered[r] = comm->all_gather_strings(std::string(r + 1, 'a' + r));
      std::vector<float> x(1000, float(r + 1));
      comm->all_reduce_sum(x.data(), x.size());
      sums[r] = x;
      if (r == 0) {
        post_call(*comm, RankCall::kForward, std::string(1 << 20, 'z'));  // larger than a socket buffer
        post_call(*comm, RankCall::kShutdown);
      } else {
        std::string payload;
        while (wait_call(*comm, &payload) != RankCall::kShutdown) calls[r] += std::to_string(payload.size());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(processes[r], size_t(kRanks));
    EXPECT_EQ(gathered[r], (std::vector<std::string>{"a", "bb", "ccc"}));
    EXPECT_EQ(sums[r], std::vector<float>(1000, 6.0f));
    if (r > 0) {
      EXPECT_EQ(calls[r], std::to_string(1 << 20));
    }
  }
}

TEST(TcpCommunicator, BadAddressesAreNamed) {
  try {
    join_tcp_world("no-port", 1, 2, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dist-init-addr 'no-port'"), std::string::npos) << e.what();
  }
  try {  // nobody listens: the worker gives up after its timeout, naming the address
    join_tcp_world("127.0.0.1:" + std::to_string(free_port()), 1, 2, 0.3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace m3::dist
