// The collectives every transport shares and the rank protocol, on ranks that are threads.
#include <gtest/gtest.h>

#include <cmath>

#include "dist/rank_protocol.h"
#include "support/thread_ranks.h"

namespace m3::testing {
namespace {

TEST(Communicator, AllReduceSumsInRankOrderAndAgreesToTheBit) {
  // Values whose sum depends on the order of the additions in fp32.
  const std::vector<float> parts = {1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<std::vector<float>> results(4);
  ThreadRanks ranks(4);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    std::vector<float> x = {parts[comm->rank()], static_cast<float>(comm->rank())};
    comm->all_reduce_sum(x.data(), x.size());
    results[comm->rank()] = x;
  });
  const float expected = ((1e8f + 1.0f) + -1e8f) + 1.0f;  // rank order
  for (const auto& r : results) {
    EXPECT_EQ(r[0], expected);
    EXPECT_EQ(r[1], 6.0f);
  }
}

TEST(Communicator, LocalIsOneRankAndSumIsIdentity) {
  auto comm = dist::local_communicator();
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> x = {0.1f, -3.0f};
  comm->all_reduce_sum(x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{0.1f, -3.0f}));
  EXPECT_EQ(comm->all_gather_strings("only"), std::vector<std::string>{"only"});
}

TEST(Communicator, GathersStringsOfDifferentLengths) {
  ThreadRanks ranks(3);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    auto all = comm->all_gather_strings(std::string(comm->rank() * 5, 'a' + comm->rank()));
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0], "");
    EXPECT_EQ(all[1], "bbbbb");
    EXPECT_EQ(all[2], "cccccccccc");
  });
}

TEST(RankProtocol, WorkersReceiveEveryCallInOrderUntilShutdown) {
  ThreadRanks ranks(3);
  std::vector<std::vector<std::string>> seen(3);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    if (comm->rank() == 0) {
      dist::WorkerRelease release(*comm);
      dist::post_call(*comm, dist::RankCall::kLoad, "{\"pages\": 4}");
      dist::post_call(*comm, dist::RankCall::kForward, std::string(100000, 'x'));
      dist::post_call(*comm, dist::RankCall::kForward, "");
      return;  // the release posts the shutdown
    }
    std::string payload;
    for (;;) {
      const dist::RankCall call = dist::wait_call(*comm, &payload);
      if (call == dist::RankCall::kShutdown) break;
      seen[comm->rank()].push_back(std::to_string(static_cast<int>(call)) + ":" +
                                   (payload.size() > 100 ? std::to_string(payload.size()) : payload));
    }
  });
  const std::vector<std::string> expected = {"1:{\"pages\": 4}", "2:100000", "2:"};
  EXPECT_EQ(seen[1], expected);
  EXPECT_EQ(seen[2], expected);
}

}  // namespace
}  // namespace m3::testing
