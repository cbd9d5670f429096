// Data-parallel attention's schedulers: requests spread over the ranks by load (running + waiting, then KV
// pages in use), a request pinned to a rank stays there, each rank budgets its own tokens and pages, the
// step lists the ranks' chunks in rank order, and finishing frees the right rank's pages.
#include <gtest/gtest.h>

#include "common/error.h"
#include "sched/data_parallel.h"

namespace m3 {
namespace {

std::vector<int32_t> tokens(int n) {
  return std::vector<int32_t>(n, 7);
}

TEST(DataParallelScheduler, SpreadsRequestsByLoadAndStepsRanksInOrder) {
  DataParallelScheduler s({8, 300}, 10, 128, 3);
  EXPECT_EQ(s.add(1, tokens(100)), 0);
  EXPECT_EQ(s.add(2, tokens(100)), 1);
  EXPECT_EQ(s.add(3, tokens(100)), 2);
  EXPECT_EQ(s.add(4, tokens(100), 0, 0, /*dp_rank=*/2), 2) << "pinned (structured output runs on rank 0)";
  EXPECT_EQ(s.add(5, tokens(100)), 0) << "ranks 0 and 1 tie at one request: the lower rank";
  EXPECT_EQ(s.num_waiting(), 5u);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 5u);
  std::vector<std::pair<int64_t, int>> got;
  for (const auto& c : p.chunks) got.push_back({c.seq_id, c.dp_rank});
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int>>{{1, 0}, {5, 0}, {2, 1}, {3, 2}, {4, 2}}));
  EXPECT_EQ(p.num_tokens, 500) << "each rank has its own 300-token budget";
  s.commit(p);
  EXPECT_EQ(s.num_running(), 5u);
  EXPECT_EQ(s.num_pages(), 30);
  EXPECT_EQ(s.num_free_pages(), 25);
  EXPECT_EQ(s.rank(2).pool().num_free(), 8);
  // Rank 1 is now the least loaded: one running request, one page.
  EXPECT_EQ(s.add(6, tokens(100)), 1);
  s.finish(3);
  s.finish(4);
  EXPECT_EQ(s.rank(2).pool().num_free(), 10) << "finish frees the owner's pages";
  EXPECT_EQ(s.add(7, tokens(100)), 2) << "rank 2 is empty again";
  EXPECT_EQ(s.rank_of(7), 2);
  s.finish(99);  // unknown: ignored
  EXPECT_THROW(s.seq(99), Error);
}

TEST(DataParallelScheduler, OneRankIsTheScheduler) {
  DataParallelScheduler s({8, 300}, 10, 128, 1);
  EXPECT_EQ(s.add(1, tokens(1000)), 0);
  const StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].num_tokens, 256);
  EXPECT_EQ(p.chunks[0].dp_rank, 0);
}

TEST(DataParallelScheduler, HostTierNeedsOneRank) {
  SchedulerOptions o{8, 300, true, /*num_host_kv_pages=*/4};
  EXPECT_THROW(DataParallelScheduler(o, 10, 128, 2), Error);
  EXPECT_THROW(DataParallelScheduler({8, 300}, 10, 128, 0), Error);
}

}  // namespace
}  // namespace m3
