// ShardLayout: for MiniMax-M3's widths at TP 1, 2, 4, 8 (and the tiny test model's), the ranks' query heads,
// MLP columns and vocabulary rows partition the model exactly; each rank holds the KV heads its query heads
// use (replicated beyond TP 4); widths that do not split, or MXFP8 slices that cut a scale block, are refused
// naming --tensor-parallel-size.
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "config/shard_layout.h"

namespace m3 {
namespace {

ModelConfig m3_widths() {
  ModelConfig c;
  c.num_heads = 64, c.num_kv_heads = 4, c.head_dim = 128;
  c.dense_intermediate_size = 12288, c.shared_intermediate_size = 3072, c.expert_intermediate_size = 3072;
  c.vocab_size = 200064;
  c.weight_quant = WeightQuant::kMxfp8;
  return c;
}

// Every index in [0, total) is in exactly one rank's slice, in rank order.
void expect_partition(const std::vector<Slice>& slices, int64_t total) {
  int64_t at = 0;
  for (const Slice& s : slices) {
    EXPECT_EQ(s.begin, at);
    EXPECT_GE(s.size(), 0);
    at = s.end;
  }
  EXPECT_EQ(at, total);
}

TEST(ShardLayout, PartitionsMiniMaxM3AtEveryTensorParallelSize) {
  const ModelConfig c = m3_widths();
  const int want_kv[] = {4, 2, 1, 1}, want_replicas[] = {1, 1, 1, 2};
  int k = 0;
  for (int tp : {1, 2, 4, 8}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    std::vector<Slice> q, dense, shared, expert, vocab;
    std::vector<int> holders(c.num_kv_heads, 0);
    for (int r = 0; r < tp; ++r) {
      const ShardLayout s = make_shard_layout(c, tp, r);
      q.push_back(s.q_heads);
      dense.push_back(s.dense_intermediate);
      shared.push_back(s.shared_intermediate);
      expert.push_back(s.expert_intermediate);
      vocab.push_back(s.vocab);
      EXPECT_EQ(s.q_heads.size(), 64 / tp);
      EXPECT_EQ(s.kv_heads.size(), want_kv[k]);
      EXPECT_EQ(s.kv_replicas, want_replicas[k]);
      // The KV heads are exactly the groups of this rank's query heads (group size 16).
      EXPECT_EQ(s.kv_heads.begin, s.q_heads.begin / 16);
      EXPECT_EQ(s.kv_heads.end, (s.q_heads.end - 1) / 16 + 1);
      for (int64_t h = s.kv_heads.begin; h < s.kv_heads.end; ++h) ++holders[h];
    }
    for (int n : holders) EXPECT_EQ(n, want_replicas[k]);
    expect_partition(q, 64);
    expect_partition(dense, 12288);
    expect_partition(shared, 3072);
    expect_partition(expert, 3072);
    expect_partition(vocab, 200064);
    ++k;
  }
  EXPECT_EQ(make_shard_layout(c, 8, 7).expert_intermediate, (Slice{2688, 3072}));
  EXPECT_EQ(make_shard_layout(c, 8, 3).vocab, (Slice{75024, 100032}));
}

TEST(ShardLayout, TheTinyModelSplitsTwoAndFourWays) {
  ModelConfig c;
  c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 32;
  c.dense_intermediate_size = 128, c.shared_intermediate_size = 32, c.expert_intermediate_size = 32;
  c.vocab_size = 200064;
  for (int tp : {2, 4, 8}) {
    std::vector<Slice> vocab;
    for (int r = 0; r < tp; ++r) vocab.push_back(make_shard_layout(c, tp, r).vocab);
    expect_partition(vocab, 200064);
  }
  const ShardLayout s = make_shard_layout(c, 8, 5);  // one query head per rank, two ranks per KV head
  EXPECT_EQ(s.q_heads, (Slice{5, 6}));
  EXPECT_EQ(s.kv_heads, (Slice{2, 3}));
  EXPECT_EQ(s.kv_replicas, 2);
}

TEST(ShardLayout, RefusalsNameTheFlagAndTheWidth) {
  auto refusal = [](const ModelConfig& c, int tp) -> std::string {
    try {
      make_shard_layout(c, tp, 0);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  const ModelConfig c = m3_widths();
  EXPECT_NE(refusal(c, 3).find("--tensor-parallel-size 3: 64 query heads"), std::string::npos)
      << refusal(c, 3);
  EXPECT_NE(refusal(c, 0).find("--tensor-parallel-size 0"), std::string::npos);
  ModelConfig odd = c;
  odd.expert_intermediate_size = 96;  // 48 columns per rank at TP 2: not whole 32-column MXFP8 blocks
  EXPECT_NE(refusal(odd, 2).find("MXFP8"), std::string::npos) << refusal(odd, 2);
  odd.weight_quant = WeightQuant::kNone;
  EXPECT_EQ(refusal(odd, 2), "") << "BF16 weights split at any column";
  ModelConfig gqa = c;
  gqa.num_heads = 48, gqa.num_kv_heads = 3;  // TP 2: 24 heads per rank = 1.5 groups of 16
  EXPECT_NE(refusal(gqa, 2).find("KV heads"), std::string::npos) << refusal(gqa, 2);
}

}  // namespace
}  // namespace m3
