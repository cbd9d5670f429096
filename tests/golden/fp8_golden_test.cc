// FP8 weights on the CPU reference. The quantiser against the MXFP8 checkpoint's own format (its dequantised
// weights are fixed points of loader/mxfp8.h), and `--quantization fp8` of bf16 checkpoints against
// transformers' bf16 outputs (a coarse bound: FP8 weights are a different model; the GPU suite checks the
// CUDA backend's FP8 path against this CPU one exactly).
#include <gtest/gtest.h>

#include <algorithm>

#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

TEST(Fp8Weights, Mxfp8CheckpointIsAFixedPointOfTheQuantiser) {
  const std::string dir = fixture_model_dir("m3-tiny-mxfp8");
  const ModelConfig c = load_model_config(dir);
  ASSERT_EQ(c.weight_quant, WeightQuant::kMxfp8);
  Checkpoint ckpt(dir);
  const ShardLayout whole = make_shard_layout(c, 1, 0);
  const CpuWeights stored = load_cpu_weights(c, ckpt, whole, /*fp8=*/false);
  const CpuWeights requantised = load_cpu_weights(c, ckpt, whole, /*fp8=*/true);
  ASSERT_EQ(stored.layers.size(), requantised.layers.size());
  size_t compared = 0;
  for (size_t l = 0; l < stored.layers.size(); ++l) {
    const CpuLayerWeights &a = stored.layers[l], &b = requantised.layers[l];
    EXPECT_EQ(a.q, b.q) << "layer " << l;
    EXPECT_EQ(a.o, b.o) << "layer " << l;
    EXPECT_EQ(a.index_k, b.index_k) << "layer " << l;
    EXPECT_EQ(a.shared_down, b.shared_down) << "layer " << l;
    for (size_t e = 0; e < a.expert_up.size(); ++e)
      EXPECT_EQ(a.expert_up[e], b.expert_up[e]) << l << "/" << e;
    compared += a.q.size() + a.o.size();
  }
  EXPECT_GT(compared, 0u);
  EXPECT_EQ(stored.embed, requantised.embed) << "the embedding is not a linear layer";
}

// Quantising moves each weight by up to 1/16 of itself (about 2.5% RMS), and the tiny fixtures amplify it
// (their SwiGLU gates sit on the clamps): measured on the CPU, the residual stream drifts 7% / 10% / 17% from
// the bf16 reference after layers 1-3 of m3-tiny-msa and the prefill logits 11-28% (relative L2 norm) over
// the prompts of both fixtures. The bound catches a wrong scale, layout or rounding (errors of order 1),
// not the model's FP8 accuracy, which the GPU suite measures on the full-width model.
constexpr double kFp8LogitTol = 0.4;

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {  // gtest names: no '-'
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

class Fp8Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Fp8Golden, OnlineFp8StaysNearTheBf16Reference) {
  auto model = load_fixture(GetParam(), 256, "fp8");
  auto exact = load_fixture(GetParam(), 256);
  auto golden = load_golden(GetParam());
  SequenceRunner run(*model), run_exact(*exact);
  std::vector<std::pair<int, std::vector<int32_t>>> work, work_exact;
  for (const GoldenPrompt& g : golden) {
    work.push_back({run.add_sequence(), g.prompt});
    work_exact.push_back({run_exact.add_sequence(), g.prompt});
  }
  const auto logits = run.step(work), logits_exact = run_exact.step(work_exact);
  for (size_t p = 0; p < golden.size(); ++p) {
    EXPECT_LT(rel_error(logits_exact[p], golden[p].prefill_last_logits), 1e-4)
        << "bf16 matches, prompt " << p;
    const double err = rel_error(logits[p], golden[p].prefill_last_logits);
    EXPECT_LT(err, kFp8LogitTol) << "prompt " << p;
    EXPECT_GT(err, 1e-3) << "FP8 weights must change the logits, prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Golden, ::testing::Values("m3-tiny-msa", "m3-tiny-block128"),
                         test_name);

}  // namespace
}  // namespace m3::testing

namespace m3::testing {
namespace {

// The FP8 KV cache of the CPU reference (K and V rounded to e4m3 with a per-token, per-head scale; index keys
// exact) and, for scale, a bf16 cache (what the CUDA backend stores), each against the exact (fp32) cache on
// the same prompts, teacher-forced through the reference's tokens: logit error, top-1 agreement and the share
// of MSA block selections that change (a changed selection is a changed model).
struct KvDrift {
  double worst = 0;
  int top1_same = 0, steps = 0;
  size_t selections = 0, changed = 0;
};

KvDrift kv_drift(const char* fixture, const std::string& kv) {
  auto model = load_fixture(fixture, 256, "", kv);
  auto exact = load_fixture(fixture, 256);
  SequenceRunner run(*model), run_exact(*exact);
  ForwardOptions opt;
  opt.trace_msa = true;
  KvDrift d;
  for (const GoldenPrompt& g : load_golden(fixture)) {
    const int a = run.add_sequence(), b = run_exact.add_sequence();
    std::vector<int32_t> feed = g.prompt;
    for (size_t s = 0; s < g.output.size(); ++s) {
      ForwardOutput oa, ob;
      const auto la = run.step({{a, feed}}, opt, &oa)[0], lb = run_exact.step({{b, feed}}, opt, &ob)[0];
      d.worst = std::max(d.worst, rel_error(la, lb));
      d.top1_same += std::max_element(la.begin(), la.end()) - la.begin() ==
                     std::max_element(lb.begin(), lb.end()) - lb.begin();
      ++d.steps;
      for (size_t l = 0; l < oa.msa_trace.size(); ++l)
        for (size_t t = 0; t < oa.msa_trace[l].size(); ++t)
          for (size_t h = 0; h < oa.msa_trace[l][t].size(); ++h) {
            ++d.selections;
            d.changed += oa.msa_trace[l][t][h] != ob.msa_trace[l][t][h];
          }
      feed = {g.output[s]};
    }
  }
  std::printf("%s, %s KV vs exact: worst logit rel error %.4f, top-1 %d/%d, MSA selections changed %zu/%zu\n",
              fixture, kv.c_str(), d.worst, d.top1_same, d.steps, d.changed, d.selections);
  return d;
}

class Fp8KvCache : public ::testing::TestWithParam<const char*> {};

// The fixtures' high-gain random weights amplify any rounding of K and V (a selection that flips moves the
// output far): measured, FP8 changes 3.3% (m3-tiny-block128) and 24% (m3-tiny-mxfp8-block128, head_dim 128)
// of the MSA selections where bf16 changes 0.24% and 2.9%. The checks are that each cache really rounds, FP8
// more than bf16, and that FP8's logits stay related to the exact ones; the numbers are reported
// (docs/performance.md), the accuracy bar of issue #13 is not claimed.
TEST_P(Fp8KvCache, RoundsMoreThanBf16AndStaysRelated) {
  const KvDrift f = kv_drift(GetParam(), "fp8"), b = kv_drift(GetParam(), "bfloat16");
  RecordProperty("fp8_worst_logit_rel_error", std::to_string(f.worst));
  RecordProperty("fp8_msa_selections_changed",
                 std::to_string(f.changed) + "/" + std::to_string(f.selections));
  RecordProperty("bf16_msa_selections_changed",
                 std::to_string(b.changed) + "/" + std::to_string(b.selections));
  EXPECT_GT(f.worst, b.worst) << "e4m3 rounds more than bf16";
  EXPECT_GT(b.worst, 0.0) << "the bf16 cache must round something";
  EXPECT_LT(f.worst, 1.0) << "an FP8 cache whose logits are unrelated to the exact ones is broken";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8KvCache,
                         ::testing::Values("m3-tiny-block128", "m3-tiny-mxfp8-block128"), test_name);

}  // namespace
}  // namespace m3::testing
