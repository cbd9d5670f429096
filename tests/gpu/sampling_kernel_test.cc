// The sampling kernel against the CPU reference (sample_rows: the adjustment entries, then sample_token) on
// fresh random rows at the real vocabulary (200064) and at small ones, with the same draws u: greedy with
// tied maxima, temperature / top-k / top-p / min-p combinations, ties at the top-k and top-p thresholds,
// penalties, bias and bans. Ids must be identical on every row and the adjusted logits bit-identical. The
// only allowed difference is a draw or top-p prefix within 1e-12 (relative) of a boundary, where the CPU's
// and the GPU's double sums may round apart: such rows are reported by name, never silently accepted. Also:
// the launch captured in a CUDA graph and replayed.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "engine/sampler.h"
#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/sampling.h"

namespace m3 {
namespace {

constexpr int kRealVocab = 200064;
constexpr double kBoundary = 1e-12;

struct Batch {
  int vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<SamplingRow> rows;
  std::vector<LogitAdjustment> adjustments;
  std::vector<uint32_t> masks;  // token-mask rows (structured output) that rows with mask_row >= 0 index
};

void add_row(Batch& b, const std::vector<float>& logits, const SamplingParams& p, double u,
             const std::vector<LogitAdjustment>& entries = {}) {
  b.logits.insert(b.logits.end(), logits.begin(), logits.end());
  const auto begin = static_cast<int32_t>(b.adjustments.size());
  b.adjustments.insert(b.adjustments.end(), entries.begin(), entries.end());
  b.rows.push_back(sampling_row(p, u, begin, static_cast<int32_t>(b.adjustments.size())));
}

// The kernel's ids; `adjusted` gets the logits it left behind.
std::vector<int32_t> run_kernel(const Batch& b, std::vector<float>* adjusted, cudaStream_t stream = nullptr) {
  const int rows = static_cast<int>(b.rows.size());
  DeviceBuffer<float> logits(b.logits);
  DeviceBuffer<SamplingRow> params(b.rows);
  DeviceBuffer<LogitAdjustment> adj(b.adjustments);
  DeviceBuffer<uint32_t> masks(b.masks);
  DeviceBuffer<int32_t> out(rows);
  out.fill_bytes(0xff);
  cuda::sample_rows(logits.get(), rows, b.vocab, params.get(), adj.get(), out.get(), stream,
                    b.masks.empty() ? nullptr : masks.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  if (adjusted) *adjusted = logits.download();
  return out.download();
}

std::string describe(const SamplingRow& r) {
  std::ostringstream s;
  s << "T=" << r.temperature << " top_k=" << r.top_k << " top_p=" << r.top_p << " min_p=" << r.min_p
    << " u=" << r.u << " entries=" << r.adj_end - r.adj_begin;
  return s.str();
}

// Kernel vs CPU on every row. Returns the number of boundary rows (reported, not failed).
int expect_same_ids(const Batch& b, const std::string& what) {
  std::vector<float> cpu_logits = b.logits;
  std::vector<SampleMargins> margins;
  const std::vector<int32_t> want =
      sample_rows(cpu_logits, b.vocab, b.rows, b.adjustments, &margins, b.masks);
  std::vector<float> gpu_logits;
  const std::vector<int32_t> got = run_kernel(b, &gpu_logits);
  EXPECT_EQ(run_kernel(b, nullptr), got) << what << ": the kernel is deterministic";
  EXPECT_EQ(got.size(), want.size());
  int boundary = 0;
  for (size_t r = 0; r < b.rows.size() && r < got.size(); ++r) {
    const float* cl = cpu_logits.data() + r * b.vocab;
    const float* gl = gpu_logits.data() + r * b.vocab;
    if (std::memcmp(cl, gl, sizeof(float) * b.vocab) != 0) {
      int i = 0;
      while (std::memcmp(cl + i, gl + i, sizeof(float)) == 0) ++i;
      ADD_FAILURE() << what << " row " << r << ": adjusted logit " << i << " differs: cpu " << cl[i]
                    << " gpu " << gl[i];
    }
    if (got[r] == want[r]) continue;
    const SampleMargins& m = margins[r];
    std::ostringstream s;
    s << what << " row " << r << " (" << describe(b.rows[r]) << "): cpu " << want[r] << " (logit "
      << cl[want[r]] << ") gpu " << got[r];
    if (got[r] >= 0 && got[r] < b.vocab) s << " (logit " << cl[got[r]] << ")";
    s << "; margins: draw " << m.draw << " top_p " << m.top_p;
    if (std::min(m.draw, m.top_p) < kBoundary) {
      ++boundary;
      std::cout << "[ boundary ] " << s.str() << " -- rounding tie, reported not failed\n";
    } else {
      ADD_FAILURE() << s.str();
    }
  }
  if (boundary) ::testing::Test::RecordProperty(what + "_boundary_rows", boundary);
  return boundary;
}

// LLM-like rows: a normal bulk plus a few peaks; `quantum` > 0 rounds to a grid (ties everywhere).
std::vector<float> random_logits(std::mt19937& rng, int vocab, float sigma, int peaks, float quantum = 0) {
  std::normal_distribution<float> bulk(0.0f, sigma);
  std::uniform_real_distribution<float> peak(4.0f, 14.0f);
  std::vector<float> l(vocab);
  for (float& x : l) x = bulk(rng);
  for (int i = 0; i < peaks; ++i) l[rng() % vocab] += peak(rng);
  if (quantum > 0)
    for (float& x : l) x = std::round(x / quantum) * quantum;
  return l;
}

SamplingParams random_params(std::mt19937& rng, int vocab) {
  const float temperatures[] = {0.3f, 0.7f, 1.0f, 1.0f, 1.5f};
  const int top_ks[] = {0, 0, 1, 2, 20, 50, 1000, 5000};
  const float top_ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.1f};
  const float min_ps[] = {0.0f, 0.0f, 0.0f, 0.02f, 0.3f};
  SamplingParams p;
  p.temperature = temperatures[rng() % 5];
  p.top_k = top_ks[rng() % 8];
  if (p.top_k >= vocab) p.top_k = 0;
  p.top_p = top_ps[rng() % 6];
  p.min_p = min_ps[rng() % 5];
  return p;
}

TEST(SamplingKernel, GreedyMatchesIncludingTiedMaxima) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int vocab : {kRealVocab, 1000, 37}) {
    Batch b;
    b.vocab = vocab;
    SamplingParams p;
    p.temperature = 0;
    for (int r = 0; r < 24; ++r) {
      std::vector<float> l = random_logits(rng, vocab, 3.0f, r % 3, r % 2 ? 0.5f : 0.0f);
      const float top = *std::max_element(l.begin(), l.end());
      for (int k = 0; k < r % 4; ++k) l[rng() % vocab] = top;   // tied maxima at random ids
      if (r == 5) l.assign(vocab, -0.0f), l[vocab / 2] = 0.0f;  // -0 and +0 tie: id 0 wins
      if (r == 6) l.assign(vocab, -std::numeric_limits<float>::infinity());
      add_row(b, l, p, sample_uniform(9, r));
    }
    EXPECT_EQ(expect_same_ids(b, "greedy V=" + std::to_string(vocab)), 0);
  }
}

TEST(SamplingKernel, FiltersMatchTheCpuRule) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(2);
  int boundary = 0;
  for (int vocab : {kRealVocab, 4096, 1000, 37}) {
    Batch b;
    b.vocab = vocab;
    const int rows = vocab == kRealVocab ? 64 : 128;
    for (int r = 0; r < rows; ++r) {
      const float sigma = r % 4 == 0 ? 0.3f : 2.5f;  // flat rows: a top-p nucleus of most of the vocabulary
      add_row(b, random_logits(rng, vocab, sigma, r % 5), random_params(rng, vocab), sample_uniform(17, r));
    }
    boundary += expect_same_ids(b, "filters V=" + std::to_string(vocab));
  }
  std::cout << "boundary rows: " << boundary << "\n";
}

TEST(SamplingKernel, TiesAtTheTopKAndTopPThresholdsGoToLowerIds) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int vocab : {kRealVocab, 1000}) {
    Batch b;
    b.vocab = vocab;
    for (int r = 0; r < 48; ++r) {
      // Integer logits: every threshold falls inside a large tie group.
      std::vector<float> l = random_logits(rng, vocab, 2.0f, 0, 1.0f);
      SamplingParams p;
      p.temperature = r % 2 ? 1.0f : 0.6f;
      p.top_k = r % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % 3000);
      p.top_p = r % 3 == 1 ? 1.0f : 0.05f + 0.9f * (rng() % 1000) / 1000.0f;
      add_row(b, l, p, sample_uniform(23, r));
    }
    expect_same_ids(b, "ties V=" + std::to_string(vocab));
  }
}

TEST(SamplingKernel, PenaltiesBiasAndBansMatch) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(4);
  for (int vocab : {kRealVocab, 1000}) {
    Batch b;
    b.vocab = vocab;
    for (int r = 0; r < 32; ++r) {
      std::vector<float> l = random_logits(rng, vocab, 2.5f, 3);
      SamplingParams p = random_params(rng, vocab);
      if (r % 4 == 0) p.temperature = 0;
      p.repetition_penalty = r % 3 ? 1.3f : 0.8f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = r % 2 ? 0.7f : -0.4f;
      PenaltyState state;
      std::vector<int32_t> banned;
      const int best = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
      if (r % 2) banned = {best, static_cast<int32_t>(rng() % vocab)};  // the greedy winner is banned
      for (int i = 0; i < 300; ++i) state.prompt_tokens.push_back(static_cast<int32_t>(rng() % vocab));
      std::sort(state.prompt_tokens.begin(), state.prompt_tokens.end());
      state.prompt_tokens.erase(std::unique(state.prompt_tokens.begin(), state.prompt_tokens.end()),
                                state.prompt_tokens.end());
      for (int i = 0; i < 40; ++i) state.output_counts[static_cast<int32_t>(rng() % vocab)] += 1 + i % 3;
      state.output_counts[best] += 2;
      for (int i = 0; i < 10; ++i)
        p.logit_bias[static_cast<int32_t>(rng() % vocab)] = (i % 2 ? 1 : -1) * 5.0f * i;
      add_row(b, l, p, sample_uniform(31, r), logit_adjustments(p, state, banned, vocab));
    }
    expect_same_ids(b, "penalties V=" + std::to_string(vocab));
  }
}

TEST(SamplingKernel, TokenMasksMatchTheCpu) {
  // Structured-output masks at the real vocabulary and a ragged small one: sparse (a handful of ids, one id,
  // ids at both ends of the row and of each CTA's slice), dense, and unmasked rows in the same launch, on
  // greedy and sampled rows, with adjustments that a mask must override (a bias on a masked id).
  M3_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (int vocab : {kRealVocab, 1000}) {
    Batch b;
    b.vocab = vocab;
    const int words = token_mask_words(vocab);
    for (int r = 0; r < 12; ++r) {
      SamplingParams p = r % 3 == 0 ? SamplingParams{} : random_params(rng, vocab);
      if (r % 3 == 0) p.temperature = 0;
      std::vector<LogitAdjustment> entries;
      if (r % 4 == 1) {
        LogitAdjustment a;
        a.id = static_cast<int32_t>(rng() % vocab);
        a.bias = 100;  // masked below unless the mask happens to allow it
        entries.push_back(a);
      }
      add_row(b, random_logits(rng, vocab, 2.5f, 3), p, sample_uniform(77, r), entries);
      if (r % 6 == 5) continue;  // unmasked
      std::vector<uint32_t> mask(words, 0);
      const int kind = r % 6;
      if (kind == 0) {
        mask[(vocab - 1) >> 5] |= 1u << ((vocab - 1) & 31);  // only the last id
      } else if (kind == 1 || kind == 2) {
        for (int i = 0; i < 7; ++i) {
          const int id = static_cast<int>(rng() % vocab);
          mask[id >> 5] |= 1u << (id & 31);
        }
        mask[0] |= 1u;  // id 0
      } else {
        for (int id = 0; id < vocab; ++id)
          if (rng() % 4) mask[id >> 5] |= 1u << (id & 31);
      }
      b.rows.back().mask_row = static_cast<int32_t>(b.masks.size() / words);
      b.masks.insert(b.masks.end(), mask.begin(), mask.end());
    }
    expect_same_ids(b, "masks V=" + std::to_string(vocab));
    std::vector<float> gpu_logits;
    const std::vector<int32_t> ids = run_kernel(b, &gpu_logits);
    for (size_t r = 0; r < b.rows.size(); ++r) {
      if (b.rows[r].mask_row < 0) continue;
      EXPECT_TRUE(token_mask_allows(b.masks.data() + size_t(b.rows[r].mask_row) * words, ids[r]))
          << "row " << r << " picked masked id " << ids[r];
    }
  }
}

TEST(SamplingKernel, GraphCaptureAndReplay) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(5);
  Batch b;
  b.vocab = kRealVocab;
  for (int r = 0; r < 8; ++r)
    add_row(b, random_logits(rng, b.vocab, 2.5f, 2), random_params(rng, b.vocab), sample_uniform(41, r));
  std::vector<float> cpu_logits = b.logits;
  const std::vector<int32_t> want = sample_rows(cpu_logits, b.vocab, b.rows, b.adjustments);

  const int rows = static_cast<int>(b.rows.size());
  DeviceBuffer<float> logits(b.logits);
  DeviceBuffer<SamplingRow> params(b.rows);
  DeviceBuffer<int32_t> out(rows);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::sample_rows(logits.get(), rows, b.vocab, params.get(), nullptr, out.get(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    logits.upload(b.logits);
    out.fill_bytes(0xff);
    // The fills run on the legacy default stream, which the non-blocking capture stream does not wait for.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(out.download(), want) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The model's default generation configs (and greedy, and plain temperature) on LLM-like rows.
std::vector<SamplingParams> default_configs() {
  std::vector<SamplingParams> c(4);
  c[0].temperature = 0;
  c[1].temperature = 0.7f, c[1].top_p = 0.95f;
  c[2].temperature = 1.0f, c[2].top_k = 40, c[2].top_p = 0.95f;
  c[3].temperature = 1.0f;
  return c;
}

TEST(SamplingKernel, DefaultConfigsAtOneAndThreeRows) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(6);
  const std::vector<SamplingParams> configs = default_configs();
  for (int rows : {1, 3}) {
    for (size_t c = 0; c < configs.size(); ++c) {
      Batch b;
      b.vocab = kRealVocab;
      for (int r = 0; r < rows; ++r)
        add_row(b, random_logits(rng, kRealVocab, r == 2 ? 0.3f : 2.0f, 1 + r), configs[c],
                sample_uniform(61, static_cast<uint64_t>(rows * 10 + r)));
      expect_same_ids(b, "defaults rows=" + std::to_string(rows) + " config " + std::to_string(c));
    }
  }
}

// Appends row r of `from` (logits, row, adjustment entries) to `to`.
void copy_row(Batch& to, const Batch& from, int r) {
  const float* l = from.logits.data() + static_cast<size_t>(r) * from.vocab;
  to.logits.insert(to.logits.end(), l, l + from.vocab);
  SamplingRow row = from.rows[r];
  const auto begin = static_cast<int32_t>(to.adjustments.size());
  to.adjustments.insert(to.adjustments.end(), from.adjustments.begin() + row.adj_begin,
                        from.adjustments.begin() + row.adj_end);
  row.adj_begin = begin, row.adj_end = static_cast<int32_t>(to.adjustments.size());
  to.rows.push_back(row);
}

// The kernel spreads a row over more CTAs the fewer rows there are; its sums do not depend on that, so a row
// gets the same id alone, among a few and among many (here up to 200 rows, one CTA each on an H200).
TEST(SamplingKernel, SameIdsWhateverTheBatchSize) {
  M3_REQUIRE_GPU();
  std::mt19937 rng(7);
  Batch base;
  base.vocab = kRealVocab;
  const std::vector<SamplingParams> configs = default_configs();
  for (int r = 0; r < 8; ++r) {
    SamplingParams p = r < 4 ? configs[r] : random_params(rng, kRealVocab);
    std::vector<LogitAdjustment> entries;
    if (r == 5) {
      p.logit_bias[static_cast<int32_t>(rng() % kRealVocab)] = 8.0f;
      entries = logit_adjustments(p, {}, std::vector<int32_t>{0, 1}, kRealVocab);
    }
    add_row(base, random_logits(rng, kRealVocab, r % 4 == 3 ? 0.3f : 2.0f, r % 4), p, sample_uniform(71, r),
            entries);
  }
  expect_same_ids(base, "batch base");
  const std::vector<int32_t> want = run_kernel(base, nullptr);
  for (int rows : {1, 3, 20, 40, 64, 200}) {
    Batch b;
    b.vocab = kRealVocab;
    for (int r = 0; r < rows; ++r) copy_row(b, base, r % 8);
    const std::vector<int32_t> got = run_kernel(b, nullptr);
    ASSERT_EQ(got.size(), static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(got[r], want[r % 8]) << "rows=" << rows << " row " << r << " (" << describe(b.rows[r]) << ")";
  }
}

}  // namespace
}  // namespace m3
