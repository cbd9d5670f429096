// The CPU model split over N ranks (threads here; processes under MPI in the e2e tests) computes what one
// rank computes: the same logits within fp32 reassociation, bit-identical on every rank, the same expert
// choices, through prefill and decode steps. Also: the forward call's byte encoding, and the shard of each
// tensor.
#include <gtest/gtest.h>

#include "common/error.h"
#include "model/backend.h"
#include "model/weight_layout.h"
#include "support/model_fixtures.h"
#include "support/thread_ranks.h"

namespace m3::testing {
namespace {

struct StepsRun {
  std::vector<std::vector<std::vector<float>>> logits;     // [step][prompt][vocab]
  std::vector<std::vector<std::vector<int32_t>>> experts;  // prefill's moe trace [layer][token]
};

// Prefills every golden prompt in one batch, then decodes three teacher-forced steps.
StepsRun run_golden_steps(ModelBackend& model, const std::vector<GoldenPrompt>& golden) {
  StepsRun run;
  SequenceRunner seqs(model);
  std::vector<std::pair<int, std::vector<int32_t>>> work;
  for (const auto& g : golden) work.push_back({seqs.add_sequence(), g.prompt});
  ForwardOptions trace;
  trace.trace_moe = true;
  ForwardOutput raw;
  run.logits.push_back(seqs.step(work, trace, &raw));
  run.experts = raw.moe_trace;
  for (size_t s = 0; s < 3; ++s) {
    work.clear();
    for (size_t p = 0; p < golden.size(); ++p) work.push_back({static_cast<int>(p), {golden[p].output[s]}});
    run.logits.push_back(seqs.step(work));
  }
  return run;
}

struct Case {
  const char* fixture;
  int tp;
  bool ep = false;  // experts split by expert (--enable-expert-parallel) rather than by column
};

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, ShardsComputeWhatOneRankComputes) {
  const auto [fixture, tp, ep] = GetParam();
  const auto golden = load_golden(fixture);
  auto whole = load_fixture(fixture);
  const StepsRun reference = run_golden_steps(*whole, golden);

  std::vector<StepsRun> runs(tp);
  std::vector<MemoryUse> memory(tp);
  ThreadRanks ranks(tp);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    auto shard = load_cpu_rank(fixture, comm, ep);
    memory[comm->rank()] = shard->memory_use();
    runs[comm->rank()] = run_golden_steps(*shard, golden);
  });
  for (size_t s = 0; s < reference.logits.size(); ++s)
    for (size_t p = 0; p < golden.size(); ++p) {
      EXPECT_LT(rel_error(runs[0].logits[s][p], reference.logits[s][p]), 1e-5)
          << "step " << s << " prompt " << p;
      for (int r = 1; r < tp; ++r) EXPECT_EQ(runs[r].logits[s][p], runs[0].logits[s][p]) << "rank " << r;
    }
  for (int r = 0; r < tp; ++r)
    EXPECT_EQ(runs[r].experts, reference.experts) << "rank " << r << " routed apart";
  // Each rank holds its part of the weights and of the KV heads (the index keys, norms and router are whole).
  const MemoryUse one = whole->memory_use();
  EXPECT_LT(memory[0].weights, one.weights * 0.75);
  EXPECT_LE(memory[0].kv, one.kv);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel,
                         ::testing::Values(Case{"m3-tiny-msa", 2}, Case{"m3-tiny-msa", 4},
                                           Case{"m3-tiny-msa", 8},  // 8 ranks share 4 KV heads in pairs
                                           Case{"m3-tiny-hf-sharded", 2}, Case{"m3-tiny-hf-sharded", 4},
                                           Case{"m3-tiny-block128", 4}, Case{"m3-tiny-msa", 2, true},
                                           Case{"m3-tiny-msa", 4, true},  // 2 of the 8 experts per rank
                                           Case{"m3-tiny-hf-sharded", 4, true}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.fixture) + "_tp" +
                                           std::to_string(info.param.tp) + (info.param.ep ? "_ep" : "");
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(TensorParallel, RefusesASplitTheModelDoesNotHaveNamingTheWidth) {
  ThreadRanks ranks(2);
  try {
    ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
      BackendOptions o;
      o.device = "cpu";
      o.num_kv_pages = 4;
      o.comm = comm;
      load_shard(fixture_model_dir("m3-tiny-mxfp8"), o);
    });
    FAIL() << "MXFP8 widths of 32 do not split into scale blocks at TP 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensor-parallel-size 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MXFP8 scale blocks"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, ShardCutsFollowTheLayout) {
  ModelConfig c = load_model_config(fixture_model_dir("m3-tiny-msa"));  // 8 heads, 4 KV heads, head_dim 32
  const ShardLayout s = make_shard_layout(c, 4, 1);
  for (const WeightSpec& w : weight_layout(c)) {
    const TensorCut cut = shard_cut(w, c, s);
    switch (w.role) {
      case WeightRole::kQ:
        EXPECT_EQ(cut.dim, 0);
        EXPECT_EQ(cut.begin, 2 * 32);
        EXPECT_EQ(cut.end, 4 * 32);
        break;
      case WeightRole::kO:
        EXPECT_EQ(cut.dim, 1);
        EXPECT_EQ(cut.begin, 2 * 32);
        break;
      case WeightRole::kK:
      case WeightRole::kIndexQ:
        EXPECT_EQ(cut.dim, 0);
        EXPECT_EQ(cut.begin, 32);
        EXPECT_EQ(cut.end, 64);
        break;
      case WeightRole::kExpertDown:
        EXPECT_EQ(cut.dim, 1);
        EXPECT_EQ(cut.end - cut.begin, c.expert_intermediate_size / 4);
        break;
      case WeightRole::kEmbed:
        EXPECT_EQ(cut.dim, 0);
        EXPECT_EQ(cut.begin, c.vocab_size / 4);
        break;
      case WeightRole::kIndexK:
      case WeightRole::kRouter:
      case WeightRole::kInputNorm:
        EXPECT_EQ(cut.dim, -1);
        break;
      default:
        break;
    }
  }
  EXPECT_EQ(shard_cut(weight_layout(c)[0], c, make_shard_layout(c, 1, 0)).dim, -1);
}

TEST(TensorParallel, ExpertParallelLayoutHoldsWholeExperts) {
  ModelConfig c = load_model_config(fixture_model_dir("m3-tiny-msa"));  // 8 routed experts
  const ShardLayout s = make_shard_layout(c, 4, 1, /*expert_parallel=*/true);
  EXPECT_TRUE(s.expert_parallel);
  EXPECT_EQ(s.experts, (Slice{2, 4}));
  EXPECT_EQ(s.expert_intermediate, (Slice{0, c.expert_intermediate_size}));
  EXPECT_EQ(s.shared_intermediate.size(), c.shared_intermediate_size / 4) << "the shared expert stays split";
  for (const WeightSpec& w : weight_layout(c))
    if (w.role == WeightRole::kExpertDown) {
      const TensorCut cut = shard_cut(w, c, s);
      EXPECT_EQ(cut.end - cut.begin, c.expert_intermediate_size) << "whole experts";
    }
  EXPECT_FALSE(make_shard_layout(c, 1, 0, true).expert_parallel) << "one rank: nothing to split";
  c.num_experts = 6;
  try {
    make_shard_layout(c, 4, 0, true);
    ADD_FAILURE() << "6 experts over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--enable-expert-parallel"), std::string::npos) << e.what();
  }
}

TEST(ForwardCall, RoundTripsThroughBytes) {
  std::vector<int32_t> table_a = {3, 7}, table_b = {1};
  ForwardBatch b;
  b.token_ids = {5, 6, 7, 8};
  b.seqs.push_back({0, 3, 130, table_a, true});
  b.seqs.push_back({3, 1, 9, table_b, false, 0, 1});
  b.sampling.push_back(SamplingRow{0.7f, 0.9f, 40, 0.05f, {1.1f, 0.2f, 0.3f}, 0.25, 0, 1});
  b.sampling_adjustments.push_back({42, -1.5f, 2, 1, 0});
  ForwardOptions o;
  o.trace_msa = true;
  const ForwardCall c = decode_forward_call(encode_forward_call(b, o));
  EXPECT_EQ(c.batch.token_ids, b.token_ids);
  ASSERT_EQ(c.batch.seqs.size(), 2u);
  EXPECT_EQ(c.batch.seqs[0].start_pos, 130);
  EXPECT_TRUE(c.batch.seqs[0].want_logits);
  EXPECT_EQ(std::vector<int32_t>(c.batch.seqs[0].block_table.begin(), c.batch.seqs[0].block_table.end()),
            table_a);
  EXPECT_EQ(c.batch.seqs[1].token_offset, 3);
  EXPECT_EQ(c.batch.seqs[0].dp_rank, 0);
  EXPECT_EQ(c.batch.seqs[1].dp_rank, 1);
  EXPECT_EQ(std::vector<int32_t>(c.batch.seqs[1].block_table.begin(), c.batch.seqs[1].block_table.end()),
            table_b);
  ASSERT_EQ(c.batch.sampling.size(), 1u);
  EXPECT_EQ(c.batch.sampling[0].top_k, 40);
  EXPECT_EQ(c.batch.sampling[0].u, 0.25);
  ASSERT_EQ(c.batch.sampling_adjustments.size(), 1u);
  EXPECT_EQ(c.batch.sampling_adjustments[0].id, 42);
  EXPECT_TRUE(c.options.trace_msa);
  EXPECT_FALSE(c.options.trace_hidden);
  std::string bytes = encode_forward_call(b, o);
  bytes.pop_back();
  EXPECT_THROW(decode_forward_call(bytes), Error);
}

}  // namespace
}  // namespace m3::testing
