// Data-parallel attention with expert parallelism (DEP) on CPU ranks (threads here; MPI processes in the e2e
// tests): each rank attends for its own sequences with the whole attention, and the MoE layers exchange the
// tokens, so every rank's logits equal one rank's computation of the whole batch, through prefill and decode,
// with a rank that holds no sequence (its dummy step still joins the exchanges). Also: how a batch splits
// over the ranks, and the layout's refusals.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "config/shard_layout.h"
#include "model/backend.h"
#include "support/model_fixtures.h"
#include "support/thread_ranks.h"

namespace m3::testing {
namespace {

struct Case {
  const char* fixture;
  int dp;
};

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, RanksComputeWhatOneRankComputes) {
  const auto [fixture, dp] = GetParam();
  const auto golden = load_golden(fixture);
  ASSERT_GE(golden.size(), 2u);
  auto whole = load_fixture(fixture);
  const auto reference = golden_steps_on_ranks(*whole, golden, std::vector<int>(golden.size(), 0));

  // The prompts over ranks 0 .. dp - 2: the last rank has none and runs dummy steps.
  std::vector<int> owner(golden.size());
  for (size_t p = 0; p < golden.size(); ++p) owner[p] = int(p) % std::max(1, dp - 1);
  std::vector<std::vector<std::vector<std::vector<float>>>> runs(dp);
  std::vector<MemoryUse> memory(dp);
  ThreadRanks ranks(dp);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    auto shard = load_cpu_rank(fixture, comm, /*expert_parallel=*/true, dp);
    EXPECT_EQ(shard->data_parallel_size(), dp);
    memory[comm->rank()] = shard->memory_use();
    runs[comm->rank()] = golden_steps_on_ranks(*shard, golden, owner);
  });
  for (size_t s = 0; s < reference.size(); ++s)
    for (size_t p = 0; p < golden.size(); ++p) {
      EXPECT_LT(rel_error(runs[0][s][p], reference[s][p]), 1e-5) << "step " << s << " prompt " << p;
      for (int r = 1; r < dp; ++r) EXPECT_EQ(runs[r][s][p], runs[0][s][p]) << "rank " << r;
    }
  // Each rank holds the whole attention (the KV of its own sequences) and its share of the experts.
  const MemoryUse one = whole->memory_use();
  EXPECT_LT(memory[0].weights, one.weights);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DataParallel,
                         ::testing::Values(Case{"m3-tiny-msa", 2}, Case{"m3-tiny-msa", 4},
                                           Case{"m3-tiny-hf-sharded", 4}, Case{"m3-tiny-block128", 2}),
                         [](const auto& info) {
                           std::string n =
                               std::string(info.param.fixture) + "_dp" + std::to_string(info.param.dp);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(DataParallel, BatchSplitsByRank) {
  std::vector<int32_t> t0 = {0}, t1 = {1}, t2 = {2};
  ForwardBatch b;
  b.token_ids = {10, 11, 12, 13, 14, 15};
  b.seqs.push_back({0, 3, 0, t0, true, 7, 0});
  b.seqs.push_back({3, 1, 5, t1, false, 8, 2});
  b.seqs.push_back({4, 2, 9, t2, true, 9, 2});
  b.sampling.resize(2);
  b.sampling[1].top_k = 5;
  const DpSplit s = split_by_dp_rank(b, 3);
  EXPECT_EQ(s.token_begin, (std::vector<int32_t>{0, 3, 3, 6}));
  EXPECT_EQ(s.row_begin, (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ(s.tokens(1), 0) << "rank 1 has nothing: a dummy step";
  const ForwardBatch two = dp_local_batch(b, s, 2);
  EXPECT_EQ(two.token_ids, (std::vector<int32_t>{13, 14, 15}));
  ASSERT_EQ(two.seqs.size(), 2u);
  EXPECT_EQ(two.seqs[0].token_offset, 0);
  EXPECT_EQ(two.seqs[1].token_offset, 1);
  EXPECT_EQ(two.seqs[1].seq_id, 9);
  ASSERT_EQ(two.sampling.size(), 1u);
  EXPECT_EQ(two.sampling[0].top_k, 5);
  EXPECT_TRUE(dp_local_batch(b, s, 1).seqs.empty());
  std::swap(b.seqs[0], b.seqs[1]);  // not in rank order
  EXPECT_THROW(split_by_dp_rank(b, 3), Error);
}

TEST(DataParallel, LayoutSplitsOnlyTheExperts) {
  ModelConfig c = load_model_config(fixture_model_dir("m3-tiny-msa"));  // 8 routed experts
  const ShardLayout s = make_dep_shard_layout(c, 4, 3);
  EXPECT_EQ(s.tp_size, 1);
  EXPECT_EQ(s.world_size(), 4);
  EXPECT_EQ(s.world_rank(), 3);
  EXPECT_EQ(s.experts, (Slice{6, 8}));
  EXPECT_EQ(s.q_heads.size(), c.num_heads);
  EXPECT_EQ(s.shared_intermediate.size(), c.shared_intermediate_size) << "the shared expert is whole";
  EXPECT_EQ(s.vocab.size(), c.vocab_size);
  c.num_experts = 6;
  try {
    make_dep_shard_layout(c, 4, 0);
    ADD_FAILURE() << "6 experts over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--data-parallel-size 4"), std::string::npos) << e.what();
  }
  ThreadRanks ranks(2);
  try {
    ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
      BackendOptions o;
      o.device = "cpu";
      o.num_kv_pages = 4;
      o.data_parallel = 2;  // without expert_parallel
      o.comm = comm;
      load_shard(fixture_model_dir("m3-tiny-msa"), o);
    });
    ADD_FAILURE() << "DP without expert parallelism";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--enable-expert-parallel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace m3::testing
