// prepare_heads (the attention input's per-head norm + partial RoPE + page writes, one launch) against the
// CPU reference's building blocks (cpu::rms_norm_gemma, Rope) on fresh random projections: a ragged batch of
// three sequences whose tokens straddle page boundaries, the real layout (q | k | v | index q | index k) with
// partial rotary dims, and the dense-layer form (q | k | v only). fp32 outputs within fp32 rounding of the
// reference, cache values the bf16 of it, and every other cache slot left as it was. FP8 pages: each head's
// scale and e4m3 bytes exactly the CPU reference's rounding (loader/mxfp8.h) of the kernel's own fp32 values.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/error.h"
#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/kernels.h"
#include "loader/mxfp8.h"
#include "model/cpu_ops.h"
#include "model/rope.h"

namespace m3 {
namespace {

using cuda::bf16;

float bf16_to_float(bf16 v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Seg {
  int heads, dim;
  bool norm, out, cache;
  bool fp8 = false;  // the cache in FP8 (needs out: the bytes are checked against the kernel's fp32 values)
};

void check_prepare_heads(const std::vector<Seg>& segs, int rotary, uint64_t seed) {
  constexpr int kPage = 16, kPages = 24, kMaxBlocks = 8;
  constexpr float kEps = 1e-6f;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.0f, 1.5f);
  // Three sequences: (first position, tokens) — a decode token, a chunk across a page boundary, one from 0.
  const std::vector<std::pair<int, int>> seqs = {{37, 1}, {13, 7}, {0, 5}};
  std::vector<int32_t> tok_seq, tok_pos, table(seqs.size() * kMaxBlocks, -1);
  std::vector<int32_t> free_pages(kPages);
  for (int i = 0; i < kPages; ++i) free_pages[i] = i;
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  int next_page = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int last = seqs[s].first + seqs[s].second - 1;
    for (int b = 0; b <= last / kPage; ++b) table[s * kMaxBlocks + b] = free_pages[next_page++];
    for (int j = 0; j < seqs[s].second; ++j) tok_seq.push_back(int(s)), tok_pos.push_back(seqs[s].first + j);
  }
  const int T = static_cast<int>(tok_pos.size());
  int width = 0;
  for (const Seg& g : segs) width += g.heads * g.dim;
  const int ld = width + 24;  // a row stride wider than the segments, as the fused projection has
  std::vector<float> proj(size_t(T) * ld);
  for (float& v : proj) v = nd(rng);
  const Rope rope(rotary, 10000.0);

  DeviceBuffer<float> d_proj(proj);
  DeviceBuffer<float> d_inv(rope.inv_freq());
  DeviceBuffer<int32_t> d_seq(tok_seq), d_pos(tok_pos), d_table(table);
  std::vector<std::vector<float>> norms;
  std::vector<std::unique_ptr<DeviceBuffer<bf16>>> d_norms, d_caches;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> d_outs, d_scales;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> d_c8;
  cuda::HeadPrep prep;
  const int count = static_cast<int>(segs.size());
  for (int g = 0, col = 0; g < count; col += segs[g].heads * segs[g].dim, ++g) {
    const Seg& sg = segs[g];
    std::vector<float> w(sg.dim);
    std::vector<bf16> wb(sg.dim);
    for (int i = 0; i < sg.dim; ++i) wb[i] = __float2bfloat16(nd(rng) * 0.3f), w[i] = bf16_to_float(wb[i]);
    norms.push_back(w);
    d_norms.push_back(std::make_unique<DeviceBuffer<bf16>>(wb));
    d_outs.push_back(std::make_unique<DeviceBuffer<float>>(sg.out ? size_t(T) * sg.heads * sg.dim : 1));
    d_caches.push_back(
        std::make_unique<DeviceBuffer<bf16>>(sg.cache ? size_t(kPages) * kPage * sg.heads * sg.dim : 1));
    const size_t rows8 = sg.cache && sg.fp8 ? size_t(kPages) * kPage * sg.heads : 1;
    d_c8.push_back(std::make_unique<DeviceBuffer<uint8_t>>(rows8 * sg.dim));
    d_scales.push_back(std::make_unique<DeviceBuffer<float>>(rows8));
    d_outs.back()->fill_bytes(0xff);
    d_caches.back()->fill_bytes(0x7b);
    d_c8.back()->fill_bytes(0x7b);
    prep.seg[g] = {col,
                   sg.heads,
                   sg.dim,
                   sg.norm ? d_norms.back()->get() : nullptr,
                   sg.out ? d_outs.back()->get() : nullptr,
                   sg.cache && !sg.fp8 ? d_caches.back()->get() : nullptr,
                   sg.cache && sg.fp8 ? d_c8.back()->get() : nullptr,
                   sg.cache && sg.fp8 ? d_scales.back()->get() : nullptr};
  }
  const cuda::TokenMeta meta{d_seq.get(), d_pos.get(), d_table.get(), kMaxBlocks};
  cuda::prepare_heads(d_proj.get(), ld, prep, d_inv.get(), meta, T, rotary, kEps, kPage, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (int g = 0, col = 0; g < count; col += segs[g].heads * segs[g].dim, ++g) {
    const Seg& sg = segs[g];
    const int HD = sg.heads * sg.dim;
    std::vector<float> want(size_t(T) * HD);
    for (int t = 0; t < T; ++t) {
      float* r = &want[size_t(t) * HD];
      std::copy_n(&proj[size_t(t) * ld + col], HD, r);
      if (!sg.norm) continue;
      cpu::rms_norm_gemma(r, r, sg.heads, sg.dim, norms[g].data(), kEps);
      std::vector<float> cs(rotary);
      rope.angles(tok_pos[t], cs.data(), cs.data() + rotary / 2);
      for (int h = 0; h < sg.heads; ++h) rope.apply(r + h * sg.dim, cs.data(), cs.data() + rotary / 2);
    }
    if (sg.out) {
      const std::vector<float> got = d_outs[g]->download();
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
            << "segment " << g << " value " << i;
    }
    if (sg.cache && sg.fp8) {
      const std::vector<float> out = d_outs[g]->download(), scales = d_scales[g]->download();
      const std::vector<uint8_t> got = d_c8[g]->download();
      for (int t = 0; t < T; ++t) {
        const int p = tok_pos[t];
        const int slot = table[tok_seq[t] * kMaxBlocks + p / kPage] * kPage + p % kPage;
        for (int h = 0; h < sg.heads; ++h) {
          const float* v = &out[size_t(t) * HD + size_t(h) * sg.dim];
          float amax = 0;
          for (int i = 0; i < sg.dim; ++i) amax = std::max(amax, std::fabs(v[i]));
          const float scale = amax > 0 ? amax / kE4m3Max : 1.0f;
          ASSERT_EQ(scales[size_t(slot) * sg.heads + h], scale)
              << "segment " << g << " token " << t << " head " << h;
          for (int i = 0; i < sg.dim; ++i)
            ASSERT_EQ(got[(size_t(slot) * sg.heads + h) * sg.dim + i], f32_to_f8e4m3(v[i] / scale))
                << "segment " << g << " token " << t << " head " << h << " " << i;
        }
      }
    } else if (sg.cache) {
      const std::vector<bf16> got = d_caches[g]->download();
      std::vector<bool> written(size_t(kPages) * kPage, false);
      for (int t = 0; t < T; ++t) {
        const int p = tok_pos[t];
        const int slot = table[tok_seq[t] * kMaxBlocks + p / kPage] * kPage + p % kPage;
        written[slot] = true;
        for (int i = 0; i < HD; ++i) {
          const float w = want[size_t(t) * HD + i], v = bf16_to_float(got[size_t(slot) * HD + i]);
          // bf16 of the reference, or its neighbour when the fp32 values sit on a rounding boundary.
          ASSERT_NEAR(v, w, std::fabs(w) * 0x1.0p-7f + 1e-30f)
              << "segment " << g << " token " << t << " " << i;
        }
      }
      for (size_t slot = 0; slot < written.size(); ++slot) {
        if (written[slot]) continue;
        for (int i = 0; i < HD; ++i) {
          uint16_t b;
          std::memcpy(&b, &got[slot * HD + i], 2);
          ASSERT_EQ(b, 0x7b7b) << "segment " << g << " slot " << slot << " was not this batch's to write";
        }
      }
    }
  }
}

TEST(PrepareHeadsKernel, MsaLayerLayoutMatchesTheCpuReference) {
  M3_REQUIRE_GPU();
  // q | k | v | index q | index k with the model's shapes scaled down: head dim 128, index dim 64, rotary 64.
  check_prepare_heads({{8, 128, true, true, false},
                       {2, 128, true, false, true},
                       {2, 128, false, false, true},
                       {4, 64, true, true, false},
                       {1, 64, true, false, true}},
                      64, 1);
}

TEST(PrepareHeadsKernel, DenseLayerLayoutAndOddDims) {
  M3_REQUIRE_GPU();
  check_prepare_heads(
      {{6, 128, true, true, false}, {3, 128, true, false, true}, {3, 128, false, false, true}}, 128, 2);
  // Dims that are not multiples of 32 (tiny test models), both outputs on one segment.
  check_prepare_heads({{5, 48, true, true, true}, {1, 48, false, true, true}, {2, 16, true, true, false}}, 16,
                      3);
}

TEST(PrepareHeadsKernel, Fp8PagesRoundAsTheCpuReference) {
  M3_REQUIRE_GPU();
  check_prepare_heads({{4, 128, true, true, false},
                       {2, 128, true, true, true, true},
                       {2, 128, false, true, true, true},
                       {1, 64, true, false, true}},
                      64, 4);
  check_prepare_heads({{2, 32, true, true, true, true}, {2, 32, false, true, true, true}}, 16, 5);
}

TEST(PrepareHeadsKernel, RejectsUnsupportedShapes) {
  M3_REQUIRE_GPU();
  cuda::HeadPrep prep;
  prep.seg[0] = {0, 1, 512, nullptr, nullptr, nullptr};
  EXPECT_THROW(cuda::prepare_heads(nullptr, 512, prep, nullptr, {}, 1, 64, 1e-6f, 16, nullptr), Error);
  prep.seg[0] = {0, 1, 32, nullptr, nullptr, nullptr};
  prep.seg[0].norm = reinterpret_cast<const bf16*>(16);  // normed, but rotary 64 > dim 32
  EXPECT_THROW(cuda::prepare_heads(nullptr, 32, prep, nullptr, {}, 1, 64, 1e-6f, 16, nullptr), Error);
}

}  // namespace
}  // namespace m3
