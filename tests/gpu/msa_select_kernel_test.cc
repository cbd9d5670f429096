// The MSA selection kernel against the CPU rule (select_blocks) on fresh random scores: rows of 1 to 8192
// visible blocks (every thread-count path of the kernel), ties (coarse values, constant rows), NaN, +-inf and
// signed zeros, ascending and descending rows (worst cases for a running top-k), init/local variants, top-k
// 16, small and wide (budgets past 32), zero budgets, poisoned entries past each token's block, which the
// kernel must never read, and "lanes" rows (half the blocks, by b % 32, beat every other block) that push far
// more candidates past the kernel's first threshold than it gathers at once (its threshold-raising loop);
// few-row cases use the decode shape (up to 1024 threads a row), many-row cases the prefill shape.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/kernels.h"
#include "model/msa_selection.h"

namespace m3 {
namespace {

struct SelectCase {
  std::string name;
  int page, topk, local, init, heads;
  std::vector<int> visible;  // visible blocks (query block + 1) of each token
};

void PrintTo(const SelectCase& c, std::ostream* os) {
  *os << c.name << " (" << c.visible.size() << " tokens)";
}

std::vector<int> range_then(int lo, int hi, std::vector<int> extra) {
  std::vector<int> v;
  for (int n = lo; n <= hi; ++n) v.push_back(n);
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

const char* kFillNames[] = {"normal", "coarse", "constant", "special", "ascending", "descending", "lanes"};
constexpr int kFills = 7;

// Scores of blocks [0, n) of one row in one of the fill modes above.
void fill_row(int mode, int n, std::mt19937& rng, float* row) {
  std::normal_distribution<float> normal;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float special[] = {nan, std::copysign(nan, -1.0f), -inf, inf, 0.0f, -0.0f, 1.0f, -1.0f};
  for (int b = 0; b < n; ++b) {
    switch (mode) {
      case 0:
        row[b] = normal(rng);
        break;
      case 1:
        row[b] = std::round(normal(rng) * 2) / 4;
        break;  // few distinct values: many ties
      case 2:
        row[b] = 1.5f;
        break;
      case 3:
        row[b] = rng() % 4 == 0 ? special[rng() % 8] : std::round(normal(rng) * 2) / 4;
        break;
      case 4:
        row[b] = 0.5f * b;
        break;
      case 5:
        row[b] = -0.5f * b;
        break;
      default:  // a constant per b % 32 (one per lane of a strided scan): blocks b % 32 < 16 beat the rest
        row[b] = b % 32 < 16 ? 1000.0f * (16 - b % 32) : -1.0f;
        break;
    }
  }
}

std::string show(const std::vector<int32_t>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? " " : "") << v[i];
  return s.str();
}

class MsaSelectKernel : public ::testing::TestWithParam<SelectCase> {};

TEST_P(MsaSelectKernel, MatchesCpuRule) {
  M3_REQUIRE_GPU();
  const SelectCase& c = GetParam();
  const int T = static_cast<int>(c.visible.size()), heads = c.heads, topk = c.topk;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  std::vector<int32_t> pos(T), seq(T, 0), table(1, 0);
  int max_visible = 1;
  for (int t = 0; t < T; ++t) {
    pos[t] = (c.visible[t] - 1) * c.page + static_cast<int>(rng() % c.page);
    max_visible = std::max(max_visible, c.visible[t]);
  }
  const int stride = max_visible + 7;
  std::vector<float> scores(size_t(T) * heads * stride);
  std::vector<int> mode(size_t(T) * heads);
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < heads; ++g) {
      const size_t row = size_t(t) * heads + g;
      mode[row] = static_cast<int>(rng() % kFills);
      fill_row(mode[row], c.visible[t], rng, &scores[row * stride]);
      for (int b = c.visible[t]; b < stride;
           ++b)  // future blocks: the best scores of the row, never eligible
        scores[row * stride + b] = b % 2 ? std::numeric_limits<float>::infinity() : 1e30f;
    }

  DeviceBuffer<float> d_scores(scores);
  DeviceBuffer<int32_t> d_pos(pos), d_seq(seq), d_table(table), d_sel(size_t(T) * heads * topk);
  d_sel.fill_bytes(0x7f);  // poison: every output slot must be written
  cuda::TokenMeta meta{d_seq.get(), d_pos.get(), d_table.get(), 1};
  cuda::msa_select(d_scores.get(), meta, T, heads, stride, c.page, topk, c.local, c.init, d_sel.get(),
                   nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> sel = d_sel.download();

  MsaConfig msa;
  msa.block_size = c.page;
  msa.topk_blocks = topk;
  msa.local_blocks = c.local;
  msa.init_blocks = c.init;
  int failures = 0;
  for (int t = 0; t < T && failures < 5; ++t)
    for (int g = 0; g < heads && failures < 5; ++g) {
      const size_t row = size_t(t) * heads + g;
      std::vector<int32_t> want;
      select_blocks(&scores[row * stride], pos[t] / c.page, msa, &want);
      want.resize(topk, -1);
      const std::vector<int32_t> got(sel.begin() + row * topk, sel.begin() + (row + 1) * topk);
      if (got != want) {
        ++failures;
        ADD_FAILURE() << c.name << ": token " << t << " group " << g << " (" << c.visible[t]
                      << " visible blocks, stride " << stride << ", fill " << kFillNames[mode[row]]
                      << ")\n  want: " << show(want) << "\n  got:  " << show(got);
      }
    }
}

std::vector<SelectCase> cases() {
  const std::vector<int> long_rows = {15,   16,   17,   18,   31,   32,   33,   63,   64,   65,   255,
                                      256,  257,  1000, 1023, 1024, 1025, 2047, 2048, 2049, 2050, 3000,
                                      4095, 4096, 4097, 6000, 8190, 8191, 8192, 8192, 7777, 5003};
  return {
      // The released model: top-16 with the local block forced.
      {"m3_short", 128, 16, 1, 0, 4, range_then(1, 300, {})},
      {"m3_long", 128, 16, 1, 0, 4, long_rows},
      {"m3_mid", 128, 16, 1, 0, 4, range_then(1, 40, {500, 1500, 2040})},
      // Forced sink and local window, budget 11.
      {"init2_local3", 16, 16, 3, 2, 4, range_then(1, 40, {100, 1000, 3000, 8192})},
      // The spec's small synthetic config (block 8, top-4).
      {"topk4", 8, 4, 1, 0, 2, range_then(1, 60, {})},
      {"topk4_init1", 8, 4, 1, 1, 1, range_then(1, 60, {300, 2500})},
      // Budget 0: only forced blocks once the row is longer than top-k.
      {"budget0_init1_local2", 8, 3, 2, 1, 2, range_then(1, 20, {1000})},
      {"budget0_local4", 8, 4, 4, 0, 1, range_then(1, 20, {5000})},
      // Budget 16 (the largest of the 16-entry lists) and budget 35 (the 64-entry lists).
      {"topk17", 16, 17, 1, 0, 2, range_then(1, 40, {3000, 8192})},
      {"topk40_init3_local2", 16, 40, 2, 3, 2, range_then(1, 80, {500, 2049, 8192})},
      // Decode shapes (one row per token and group, few rows: wide CTAs) at 8K..1M tokens of context, and
      // a many-row batch of long rows (narrow CTAs, the threshold loop on "lanes" rows).
      {"decode_1", 128, 16, 1, 0, 4, {64}},
      {"decode_8", 128, 16, 1, 0, 4, {1024, 64, 8192, 17, 16, 2000, 4097, 300}},
      {"decode_1m", 128, 16, 1, 0, 4, {8192, 8191, 7000}},
      {"many_long", 128, 16, 1, 0, 1, std::vector<int>(200, 3000)},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, MsaSelectKernel, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<SelectCase>& i) { return i.param.name; });

TEST(MsaSelectKernel, RejectsBadConfig) {
  cuda::TokenMeta meta{nullptr, nullptr, nullptr, 1};
  EXPECT_THROW(cuda::msa_select(nullptr, meta, 1, 1, 1, 8, 65, 1, 0, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::msa_select(nullptr, meta, 1, 1, 1, 8, 4, 0, 0, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::msa_select(nullptr, meta, 1, 1, 1, 8, 4, 3, 2, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace m3
