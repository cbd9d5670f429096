// The tensor-core paged attention against a double-precision CPU computation on fresh random inputs: head_dim
// 32/64/128/256, GQA groups 1..16 (and a group wider than a CTA's rows), dense and MSA block-sparse, page
// sizes 8/16/128 with shuffled page ids, a ragged batch (prefill chunks that start mid-page and cross page
// boundaries, decode rows, a 1-token sequence at position 0) and a decode-only batch (the decode kernel),
// selections with fewer than top-k blocks (and a top-k past 32: the decode kernel's block window moves),
// split-K 1 / 3 / 16 / the launcher's choice, each launched twice on a workspace poisoned beforehand (the
// split-K counters must work from garbage and be left reusable, as in a CUDA-graph replay), the second time
// with the tile list reversed (tile i no longer holds token i: the decode kernel's guess is wrong), the
// output poisoned beforehand and cache slots past each sequence's end (and unused pages) filled with NaN,
// which must never reach the output. FP8 pages (e4m3 + a scale per token and KV head, values spread over
// four decades so the scales matter) against the same computation on their dequantised values. Plus the
// host-side tile plan, split heuristics and workspace layout.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/attention_plan.h"
#include "kernels/kernels.h"
#include "loader/dtype.h"
#include "loader/mxfp8.h"

namespace m3 {
namespace {

using cuda::bf16;

TEST(AttentionPlan, TilesCoverEachSequenceWithoutCrossingIt) {
  const std::vector<cuda::TokenRange> seqs = {{0, 70}, {70, 1}, {71, 1}, {72, 40}, {112, 9}, {121, 0}};
  for (int group : {1, 2, 3, 8, 16, 64, 160}) {
    for (int dim : {64, 256}) {
      const cuda::AttentionPlan plan = cuda::plan_attention(seqs, group, dim);
      const int cap = cuda::attention_tile_tokens(group, dim);
      EXPECT_GE(cap, 1);
      EXPECT_LE(std::min(group, cuda::attention_max_rows(dim)) * cap, cuda::attention_max_rows(dim));
      std::vector<int> covered(121, 0);
      int max_tokens = 0;
      for (const cuda::AttentionTile& t : plan.tiles) {
        ASSERT_GT(t.count, 0);
        ASSERT_LE(t.count, cap) << "group " << group << " dim " << dim;
        max_tokens = std::max<int>(max_tokens, t.count);
        int owner = -1;
        for (size_t s = 0; s < seqs.size(); ++s)
          if (t.first >= seqs[s].first && t.first < seqs[s].first + seqs[s].count) owner = int(s);
        ASSERT_GE(owner, 0);
        EXPECT_LE(t.first + t.count, seqs[owner].first + seqs[owner].count) << "tile crosses a sequence end";
        for (int i = t.first; i < t.first + t.count; ++i) ++covered[i];
      }
      EXPECT_EQ(plan.max_tokens, max_tokens);
      for (int i = 0; i < 121; ++i) EXPECT_EQ(covered[i], 1) << "token " << i << " group " << group;
    }
  }
  // Decode: one tile per token.
  const cuda::AttentionPlan decode = cuda::plan_attention({{0, 1}, {1, 1}, {2, 1}}, 16, 128);
  EXPECT_EQ(decode.tiles.size(), 3u);
  EXPECT_EQ(decode.max_tokens, 1);
}

TEST(AttentionPlan, SplitsOnlyWhenTheGridIsSmall) {
  EXPECT_EQ(cuda::attention_splits(4096, 8192, 132), 1);  // prefill fills the GPU
  EXPECT_EQ(cuda::attention_splits(4, 64, 132), 1);       // too few keys to split
  const int s = cuda::attention_splits(4, 8192, 132);     // decode B=1 x 4 KV heads, 8K keys
  EXPECT_GT(s, 1);
  EXPECT_LE(s, 32);
  EXPECT_EQ(cuda::attention_splits(4, 8192, 132), s);  // pure
  EXPECT_EQ(cuda::attention_workspace_floats(10, 8, 64, 1), 0u);
  // Counters (8 bytes per (token, head) at most, rounded to 16 bytes), partials, log-sum-exps.
  const cuda::AttentionWorkspace w = cuda::attention_workspace_layout(10, 7, 64, 3);
  EXPECT_EQ(w.counters, 0u);
  EXPECT_EQ(w.partials, 140u);
  EXPECT_EQ(w.lse, 140u + 3 * 70 * 64);
  EXPECT_EQ(w.floats, w.lse + 3 * 70);
  EXPECT_EQ(cuda::attention_workspace_floats(10, 7, 64, 3), w.floats);
  EXPECT_EQ(cuda::attention_workspace_floats(10, 8, 64, 3), size_t(160) + size_t(3) * 10 * 8 * 65);
}

TEST(AttentionPlan, DecodeSplitsGiveEachCtaWholeBlocks) {
  for (int64_t ctas : {1, 4, 32, 128, 256, 4096})
    for (int64_t keys : {1, 100, 2048, 8192, 131072}) {
      const int s = cuda::attention_decode_splits(ctas, keys, 128, 132);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, 32);
      if (s > 1) {
        EXPECT_GE(keys / s, 128) << "ctas " << ctas << " keys " << keys << " splits " << s;
      }
      EXPECT_EQ(cuda::attention_decode_splits(ctas, keys, 128, 132), s);  // pure
    }
  // B = 1, 4 KV heads, MSA top-16 x 128: the 64 blocks are spread over many CTAs; a full grid is not split.
  EXPECT_GE(cuda::attention_decode_splits(4, 2048, 128, 132), 4);
  EXPECT_EQ(cuda::attention_decode_splits(4096, 8192, 128, 132), 1);
}

struct Case {
  int dim, group, page;
  bool sparse, decode = false;  // decode: a batch of one-token sequences only
  int topk = 0;                 // 0: by page size
  bool fp8 = false;             // FP8 pages
};

std::string case_name(const Case& c) {
  std::ostringstream name;
  name << "d" << c.dim << "_g" << c.group << "_p" << c.page << (c.sparse ? "_sparse" : "_dense")
       << (c.decode ? "_decode" : "") << (c.topk ? "_top" + std::to_string(c.topk) : "")
       << (c.fp8 ? "_fp8" : "");
  return name.str();
}

class AttentionKernel : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionKernel, MatchesCpuReference) {
  M3_REQUIRE_GPU();
  const Case c = GetParam();
  const int D = c.dim, P = c.page, G = c.group;
  const int Hkv = G > 16 ? 1 : 2, Hq = G * Hkv;
  const int topk = c.topk ? c.topk : P >= 128 ? 4 : P >= 16 ? 6 : 8;
  std::mt19937 rng(D * 1000 + G * 10 + P + (c.sparse ? 7 : 0));
  std::normal_distribution<float> normal;

  // Ragged batch, in batch order: a prefill chunk starting mid-page, decode rows (one at position 0), a first
  // chunk, a short chunk. Decode: one-token sequences at page starts / ends / middles.
  struct Seq {
    int start, count;
  };
  const std::vector<Seq> seqs =
      c.decode ? std::vector<Seq>{{600, 1},   {0, 1}, {257, 1},       {2 * P + P / 2 + 70, 1},
                                  {P - 1, 1}, {P, 1}, {5 * P + 3, 1}, {1, 1}}
               : std::vector<Seq>{{2 * P + P / 2 + 1, 70}, {600, 1}, {0, 1}, {0, 40}, {257, 1}, {130, 9}};
  const int S = int(seqs.size());
  std::vector<int32_t> tok_seq, tok_pos;
  std::vector<cuda::TokenRange> ranges;
  int max_blocks = 1, total_pages = 0, max_pos = 0;
  for (int s = 0; s < S; ++s) {
    ranges.push_back({int32_t(tok_seq.size()), seqs[s].count});
    for (int i = 0; i < seqs[s].count; ++i) tok_seq.push_back(s), tok_pos.push_back(seqs[s].start + i);
    const int last = seqs[s].start + seqs[s].count - 1;
    max_pos = std::max(max_pos, last);
    max_blocks = std::max(max_blocks, last / P + 1);
    total_pages += last / P + 1;
  }
  const int T = int(tok_seq.size());
  const int spare = 3;  // pages no sequence owns: NaN
  const int pages = total_pages + spare;
  std::vector<int32_t> ids(pages);
  for (int i = 0; i < pages; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(S) * max_blocks, 0);
  for (int s = 0, next = 0; s < S; ++s)
    for (int b = 0; b <= (seqs[s].start + seqs[s].count - 1) / P; ++b)
      table[size_t(s) * max_blocks + b] = ids[next++];

  // Caches: random below each sequence's end, NaN past it and in the spare pages.
  const size_t row = size_t(Hkv) * D;
  const bf16 nan = __float2bfloat16(std::numeric_limits<float>::quiet_NaN());
  std::vector<bf16> kc(size_t(pages) * P * row, nan), vc(size_t(pages) * P * row, nan);
  std::vector<float> kf(kc.size(), 0.f), vf(vc.size(), 0.f);  // the same values as float (valid slots only)
  auto slot_base = [&](int s, int j) {
    return (size_t(table[size_t(s) * max_blocks + j / P]) * P + j % P) * row;
  };
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < seqs[s].start + seqs[s].count; ++j)
      for (size_t x = 0; x < row; ++x) {
        const size_t i = slot_base(s, j) + x;
        kc[i] = __float2bfloat16(normal(rng)), vc[i] = __float2bfloat16(normal(rng));
        kf[i] = __bfloat162float(kc[i]), vf[i] = __bfloat162float(vc[i]);
      }
  // FP8 pages: each valid (slot, head) row scaled, K by 10^[-0.5, 0) (normed in the model; larger K make the
  // bf16 rounding of Q, which this check does not model, dominate it), V by 10^[-2, 2), then e4m3 with the
  // row's amax / 448 scale; the reference reads the dequantised values.
  std::vector<uint8_t> k8(kc.size(), 0x7f), v8(vc.size(), 0x7f);  // NaN where no sequence wrote
  std::vector<float> ksc(kc.size() / D, std::numeric_limits<float>::quiet_NaN()), vsc(ksc);
  if (c.fp8) {
    std::uniform_real_distribution<float> decade(-1.f, 1.f);
    auto quantise = [&](std::vector<float>& f, std::vector<uint8_t>& b, std::vector<float>& sc, size_t base,
                        float decades, float offset) {
      const float mag = std::pow(10.f, decades * decade(rng) + offset);
      float amax = 0;
      for (int d = 0; d < D; ++d) amax = std::max(amax, std::abs(f[base + d] *= mag));
      const float scale = amax > 0 ? amax / kE4m3Max : 1.f;
      sc[base / D] = scale;
      for (int d = 0; d < D; ++d) {
        b[base + d] = f32_to_f8e4m3(f[base + d] / scale);
        f[base + d] = f8e4m3_to_f32(b[base + d]) * scale;
      }
    };
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < seqs[s].start + seqs[s].count; ++j)
        for (int g = 0; g < Hkv; ++g) {
          quantise(kf, k8, ksc, slot_base(s, j) + size_t(g) * D, 0.25f, -0.25f);
          quantise(vf, v8, vsc, slot_base(s, j) + size_t(g) * D, 2.f, 0.f);
        }
  }
  std::vector<float> q(size_t(T) * Hq * D);
  for (auto& x : q) x = normal(rng);

  // Selections: the local block plus 0..topk-1 earlier blocks, ascending, -1 padded; a token often reuses its
  // predecessor's earlier blocks (like real selections).
  std::vector<int32_t> sel(size_t(T) * Hkv * topk, -1);
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < Hkv; ++g) {
      const int L = tok_pos[t] / P;
      std::vector<int32_t> others;
      const bool reuse = t > 0 && tok_seq[t - 1] == tok_seq[t] && rng() % 10 < 6;
      if (reuse) {
        for (int k = 0; k < topk; ++k) {
          const int32_t b = sel[(size_t(t - 1) * Hkv + g) * topk + k];
          if (b >= 0 && b < L) others.push_back(b);
        }
      } else {
        const int want = int(rng() % topk);
        for (int tries = 0; tries < 4 * topk && int(others.size()) < want && L > 0; ++tries) {
          const int32_t b = int32_t(rng() % L);
          if (std::find(others.begin(), others.end(), b) == others.end()) others.push_back(b);
        }
      }
      while (int(others.size()) > topk - 1) others.erase(others.begin() + rng() % others.size());
      others.push_back(L);
      std::sort(others.begin(), others.end());
      std::copy(others.begin(), others.end(), sel.begin() + (size_t(t) * Hkv + g) * topk);
    }
  const float scale = 1.0f / std::sqrt(float(D));

  // Reference (double), per (token, head) row.
  std::vector<double> ref(size_t(T) * Hq * D);
  std::vector<int> nkeys(size_t(T) * Hkv);
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < Hkv; ++g) {
      std::vector<size_t> keys;
      for (int j = 0; j <= tok_pos[t]; ++j) {
        bool ok = !c.sparse;
        for (int k = 0; k < topk && !ok; ++k) ok = sel[(size_t(t) * Hkv + g) * topk + k] == j / P;
        if (ok) keys.push_back(slot_base(tok_seq[t], j) + size_t(g) * D);
      }
      nkeys[size_t(t) * Hkv + g] = int(keys.size());
      std::vector<double> sc(keys.size());
      for (int hh = 0; hh < G; ++hh) {
        const int h = g * G + hh;
        const float* qr = &q[(size_t(t) * Hq + h) * D];
        double mx = -1e300;
        for (size_t i = 0; i < keys.size(); ++i) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += double(qr[d]) * kf[keys[i] + d];
          sc[i] = acc * scale;
          mx = std::max(mx, sc[i]);
        }
        double sum = 0;
        double* out = &ref[(size_t(t) * Hq + h) * D];
        for (size_t i = 0; i < keys.size(); ++i) {
          const double p = std::exp(sc[i] - mx);
          sum += p;
          for (int d = 0; d < D; ++d) out[d] += p * vf[keys[i] + d];
        }
        for (int d = 0; d < D; ++d) out[d] /= sum;
      }
    }

  DeviceBuffer<bf16> d_k(kc), d_v(vc);
  DeviceBuffer<uint8_t> d_k8(k8), d_v8(v8);
  DeviceBuffer<float> d_ks(ksc), d_vs(vsc);
  const cuda::KvPages kv =
      c.fp8 ? cuda::KvPages{nullptr, nullptr, d_k8.get(), d_v8.get(), d_ks.get(), d_vs.get()}
            : cuda::KvPages{d_k.get(), d_v.get()};
  DeviceBuffer<float> d_q(q);
  DeviceBuffer<int32_t> d_pos(tok_pos), d_seq(tok_seq), d_table(table), d_sel(sel);
  const cuda::AttentionPlan plan = cuda::plan_attention(ranges, G, D);
  DeviceBuffer<cuda::AttentionTile> d_tiles(plan.tiles);
  const cuda::AttentionTiles tiles{d_tiles.get(), int(plan.tiles.size()), plan.max_tokens};
  const std::vector<cuda::AttentionTile> reversed(plan.tiles.rbegin(), plan.tiles.rend());
  DeviceBuffer<cuda::AttentionTile> d_reversed(reversed);
  const cuda::AttentionTiles tiles_reversed{d_reversed.get(), int(reversed.size()), plan.max_tokens};
  const cuda::TokenMeta meta{d_seq.get(), d_pos.get(), d_table.get(), max_blocks};
  const int32_t* selection = c.sparse ? d_sel.get() : nullptr;
  const int auto_splits =
      cuda::paged_attention_splits(tiles, Hq, Hkv, D, P, c.sparse, topk, max_pos + 1, c.fp8);
  size_t ws_floats = cuda::attention_workspace_floats(T, Hq, D, 16);
  ws_floats = std::max(ws_floats, cuda::paged_attention_workspace_floats(tiles, T, Hq, Hkv, D, P, c.sparse,
                                                                         topk, max_pos + 1, c.fp8));
  DeviceBuffer<float> d_ws(ws_floats);
  DeviceBuffer<bf16> d_out(size_t(T) * Hq * D);
  std::vector<bf16> out(size_t(T) * Hq * D);

  d_ws.fill_bytes(0xff);  // garbage split-K counters and partials
  for (int run = 0; run < 8; ++run) {
    const int splits = std::vector<int>{1, 3, 16, 0}[run / 2];  // 0: paged_attention's own choice
    const cuda::AttentionTiles& launch_tiles = run % 2 ? tiles_reversed : tiles;
    d_out.fill_bytes(0xff);  // NaN poison: every element must be written
    if (splits == 0)
      cuda::paged_attention(d_q.get(), kv, meta, selection, topk, launch_tiles, T, Hq, Hkv, D, P, max_pos + 1,
                            scale, d_ws.get(), d_out.get(), nullptr);
    else
      cuda::paged_attention_with_splits(d_q.get(), kv, meta, selection, topk, launch_tiles, T, Hq, Hkv, D, P,
                                        splits, scale, d_ws.get(), d_out.get(), nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out = d_out.download();

    // Per element |err| <= 2e-2 x max |ref| of its (token, head) row: bf16 inputs, P rounded to bf16 for the
    // P.V MMA and a bf16 output give ~0.5% of the row scale; a wrongly masked key moves a row by ~1/keys.
    double worst = 0, sum_err = 0, sum_ref = 0, global_max = 0;
    size_t worst_i = 0, bad = 0, nans = 0;
    for (size_t rowi = 0; rowi < size_t(T) * Hq; ++rowi) {
      double row_max = 0;
      for (int d = 0; d < D; ++d) row_max = std::max(row_max, std::abs(ref[rowi * D + d]));
      global_max = std::max(global_max, row_max);
      for (int d = 0; d < D; ++d) {
        const size_t i = rowi * D + d;
        const double got = __bfloat162float(out[i]);
        if (std::isnan(got)) {
          if (nans++ == 0) worst_i = i, worst = std::numeric_limits<double>::infinity();
          continue;
        }
        const double err = std::abs(got - ref[i]);
        sum_err += err;
        sum_ref += std::abs(ref[i]);
        const double ratio = err / std::max(row_max, 1e-6);
        if (ratio > 2e-2) ++bad;
        if (ratio > worst && nans == 0) worst = ratio, worst_i = i;
      }
    }
    const size_t wrow = worst_i / D;
    const int wt = int(wrow / Hq), wh = int(wrow % Hq), wd = int(worst_i % D);
    std::ostringstream where;
    where << case_name(c)
          << " splits=" << (splits ? std::to_string(splits) : "auto(" + std::to_string(auto_splits) + ")")
          << (run % 2 ? " (second launch, tiles reversed)" : "") << ": worst err/row_max " << worst
          << " at token " << wt << " (seq " << tok_seq[wt] << ", pos " << tok_pos[wt] << ", keys "
          << nkeys[size_t(wt) * Hkv + wh / G] << ") head " << wh << " dim " << wd << ": expected "
          << ref[worst_i] << " got " << __bfloat162float(out[worst_i]) << "; " << bad
          << " elements over 2e-2, " << nans << " NaN; mean err " << sum_err / out.size() << " vs mean |ref| "
          << sum_ref / out.size() << ", max |ref| " << global_max;
    std::printf("%s\n", where.str().c_str());
    EXPECT_EQ(nans, 0u) << where.str();
    EXPECT_EQ(bad, 0u) << where.str();
    EXPECT_LE(sum_err, 1e-2 * sum_ref) << where.str();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernel,
    ::testing::Values(
        Case{128, 16, 128, false}, Case{128, 16, 128, true}, Case{128, 8, 16, false}, Case{128, 8, 16, true},
        Case{64, 2, 8, false}, Case{64, 2, 8, true}, Case{32, 1, 16, false}, Case{32, 1, 16, true},
        Case{64, 16, 8, true}, Case{32, 8, 128, false}, Case{128, 1, 8, true}, Case{128, 2, 128, true},
        Case{64, 3, 16, true}, Case{256, 4, 16, false}, Case{256, 4, 16, true}, Case{32, 160, 16, false},
        Case{128, 16, 128, false, true}, Case{128, 16, 128, true, true}, Case{128, 8, 16, false, true},
        Case{128, 8, 16, true, true}, Case{64, 2, 8, true, true}, Case{32, 1, 16, false, true},
        Case{128, 1, 8, true, true}, Case{256, 4, 16, false, true}, Case{256, 4, 16, true, true},
        Case{32, 160, 16, true, true}, Case{64, 4, 8, true, true, 40}, Case{128, 16, 8, true, false, 40},
        // FP8 pages: the wgmma tile (d128, 128 rows), the mma.sync tiles, the decode kernel, every dim.
        Case{128, 16, 128, false, false, 0, true}, Case{128, 16, 128, true, false, 0, true},
        Case{64, 2, 8, true, false, 0, true}, Case{32, 160, 16, false, false, 0, true},
        Case{256, 4, 16, true, false, 0, true}, Case{128, 16, 128, false, true, 0, true},
        Case{128, 16, 128, true, true, 0, true}, Case{64, 4, 8, true, true, 40, true},
        Case{32, 1, 16, false, true, 0, true}, Case{256, 4, 16, true, true, 0, true}),
    [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace m3
