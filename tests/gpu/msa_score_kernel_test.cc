// The MSA block-score kernels (prefill and decode paths) against a double-precision CPU computation from the
// same bf16 keys and bf16-rounded queries: ragged batches (a prefill chunk starting mid-page, single decode
// tokens, position 0, a chunk from 0 across pages, page-end and page-start positions), page sizes 8/16/128,
// shuffled page ids, 1/3/4/8/12 index heads, dims 32/64/128, long decode rows (L = 200K) and a long prefill
// chunk. Unwritten cache slots hold NaN (they must be masked), block-table entries past a sequence point far
// outside the cache (they must not be read), and the score buffer is poisoned: entries past each token's
// block must keep the poison (the kernels do not write them).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/kernels.h"

namespace m3 {
namespace {

struct Chunk {
  int start, len;  // query positions [start, start + len) of one sequence
};

struct ScoreCase {
  std::string name;
  int page, heads, dim;
  int hint;  // max_tokens_per_seq given to the launcher: 1 picks the decode path, 0 the prefill path
  std::vector<Chunk> seqs;
};

void PrintTo(const ScoreCase& c, std::ostream* os) {
  *os << c.name << " (" << c.seqs.size() << " sequences)";
}

uint16_t to_bf16(float f) {  // round to nearest even, as the kernels' conversion
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr uint16_t kNanBf16 = 0x7fc0;
constexpr uint32_t kPoison = 0x7f7f7f7f;  // a finite float (3.4e38) no kernel computes here

class MsaScoreKernel : public ::testing::TestWithParam<ScoreCase> {};

TEST_P(MsaScoreKernel, MatchesCpuReference) {
  M3_REQUIRE_GPU();
  const ScoreCase& c = GetParam();
  const int P = c.page, H = c.heads, D = c.dim, S = static_cast<int>(c.seqs.size());
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));

  // Tokens, pages (one shuffled id space for every sequence, plus spare pages) and the block table.
  std::vector<int32_t> seq, pos;
  std::vector<int> npages(S);
  int total_pages = 3, max_blocks = 1;
  for (int i = 0; i < S; ++i) {
    for (int k = 0; k < c.seqs[i].len; ++k) {
      seq.push_back(i);
      pos.push_back(c.seqs[i].start + k);
    }
    npages[i] = (c.seqs[i].start + c.seqs[i].len - 1) / P + 1;
    total_pages += npages[i];
    max_blocks = std::max(max_blocks, npages[i] + 2);
  }
  const int T = static_cast<int>(pos.size());
  std::vector<int32_t> ids(total_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  // Entries past a sequence's pages point far outside the cache: reading one faults.
  std::vector<int32_t> table(size_t(S) * max_blocks, 0x3fffffff);
  for (int i = 0, next = 0; i < S; ++i)
    for (int b = 0; b < npages[i]; ++b) table[size_t(i) * max_blocks + b] = ids[next++];

  // Index keys of positions 0..last of each sequence; every other slot NaN. Keys as floats per sequence too.
  std::vector<uint16_t> cache(size_t(total_pages) * P * D, kNanBf16);
  std::vector<std::vector<float>> keys(S);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  double kmax = 0;
  for (int i = 0; i < S; ++i) {
    const int len = c.seqs[i].start + c.seqs[i].len;
    keys[i].resize(size_t(len) * D);
    for (int j = 0; j < len; ++j) {
      const size_t slot = (size_t(table[size_t(i) * max_blocks + j / P]) * P + j % P) * D;
      double norm = 0;
      for (int d = 0; d < D; ++d) {
        const uint16_t h = to_bf16(uni(rng));
        cache[slot + d] = h;
        keys[i][size_t(j) * D + d] = from_bf16(h);
        norm += double(from_bf16(h)) * from_bf16(h);
      }
      kmax = std::max(kmax, std::sqrt(norm));
    }
  }
  std::normal_distribution<float> normal;
  std::vector<float> q(size_t(T) * H * D);
  for (auto& x : q) x = normal(rng);
  int stride = 1;
  for (int t = 0; t < T; ++t) stride = std::max(stride, pos[t] / P + 1);
  stride += 2;  // slack past every token's block: must stay poisoned

  DeviceBuffer<uint16_t> d_cache(cache);
  DeviceBuffer<float> d_q(q), d_out(size_t(T) * H * stride);
  DeviceBuffer<int32_t> d_seq(seq), d_pos(pos), d_table(table);
  d_out.fill_bytes(0x7f);
  cuda::TokenMeta meta{d_seq.get(), d_pos.get(), d_table.get(), max_blocks};
  cuda::msa_block_scores(d_q.get(), reinterpret_cast<const cuda::bf16*>(d_cache.get()), meta, T, H, D, P,
                         stride, d_out.get(), nullptr, c.hint);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name;
  const std::vector<float> out = d_out.download();

  // Reference in double; compare within 1e-3 x |q| x max|k| (fp32 accumulation of exact bf16 products).
  int64_t bad = 0, checked = 0;
  double worst = -1;
  std::string worst_at;
  std::vector<double> qd(D), best;
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < H; ++g) {
      const float* qt = &q[(size_t(t) * H + g) * D];
      double qn = 0;
      for (int d = 0; d < D; ++d) {
        qd[d] = from_bf16(to_bf16(qt[d]));
        qn += qd[d] * qd[d];
      }
      const int L = pos[t] / P;
      best.assign(L + 1, -INFINITY);
      const float* kt = keys[seq[t]].data();
      for (int j = 0; j <= pos[t]; ++j) {
        double s = 0;
        for (int d = 0; d < D; ++d) s += qd[d] * kt[size_t(j) * D + d];
        best[j / P] = std::max(best[j / P], s);
      }
      const double tol = 1e-3 * std::sqrt(qn) * kmax;
      const float* row = &out[(size_t(t) * H + g) * stride];
      for (int b = 0; b < stride; ++b) {
        uint32_t bits;
        std::memcpy(&bits, &row[b], 4);
        // Visible blocks: error / tolerance (NaN -> inf). Past the token's block: the poison must survive.
        double err = b <= L ? std::fabs(double(row[b]) - best[b]) / tol : bits == kPoison ? 0 : INFINITY;
        if (std::isnan(err)) err = INFINITY;
        checked += b <= L;
        bad += err > 1;
        if (err > worst) {
          std::ostringstream at;
          at << "token " << t << " (seq " << seq[t] << ", pos " << pos[t] << ") head " << g << " block " << b;
          if (b <= L)
            at << ": want " << best[b] << " got " << row[b];
          else
            at << " (past its block " << L << "): written " << row[b];
          worst = err;
          worst_at = at.str();
        }
      }
    }
  EXPECT_EQ(bad, 0) << c.name << ": " << bad << " bad of " << checked << " scores (T " << T << ", stride "
                    << stride << "); worst |err| / tol = " << worst << " at " << worst_at;
}

std::vector<ScoreCase> cases() {
  std::vector<ScoreCase> v;
  auto ragged = [](int P) {
    return std::vector<Chunk>{{0, 1},     {3 * P + 5, 70}, {37 * P + 3, 1}, {0, 2 * P + 1},
                              {P - 1, 1}, {5 * P, 20},     {11 * P + 7, 1}};
  };
  for (int P : {8, 16, 128})
    for (int H : {1, 4})
      for (int D : {32, 64, 128})
        for (int hint : {0, 1}) v.push_back({"ragged", P, H, D, hint, ragged(P)});
  for (int hint : {0, 1}) {
    v.push_back({"ragged", 16, 3, 64, hint, ragged(16)});
    v.push_back({"ragged", 16, 8, 64, hint, ragged(16)});
    v.push_back({"ragged", 8, 12, 32, hint, ragged(8)});  // > 8 heads: the decode hint falls back to prefill
    std::vector<Chunk> decode_batch;
    for (int i = 0; i < 40; ++i) decode_batch.push_back({(i * 7919) % 3000, 1});
    v.push_back({"decode_batch", 16, 1, 64, hint, decode_batch});
    v.push_back({"decode_batch", 128, 4, 128, hint, decode_batch});
    v.push_back({"long_decode", 128, 4, 128, hint, {{199999, 1}, {150000, 1}, {77777, 1}, {0, 1}}});
    v.push_back({"long_prefill", 128, 4, 128, hint, {{8744, 256}, {5000, 1}, {130, 40}}});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, MsaScoreKernel, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ScoreCase>& i) {
                           const ScoreCase& c = i.param;
                           return c.name + "_P" + std::to_string(c.page) + "_H" + std::to_string(c.heads) +
                                  "_D" + std::to_string(c.dim) + (c.hint == 1 ? "_decode" : "_prefill");
                         });

}  // namespace
}  // namespace m3
