// The decode MoE at real widths (hidden 6144, expert width 3072, 128 experts, top-4, plus the shared expert
// as group 128): device grouping, the two grouped GEMVs (gate/up with SwiGLU-OAI, down) and the combine, with
// uniform random routing (B > 32: without the shared expert, which the model then runs as a dense GEMM).
// Floor: every touched expert slab read once from HBM. moe_decode_fp8: the same with MXFP8 expert weights
// (kernels/fp8.h; 1 + 1/32 bytes per weight), quantised from the bf16 ones.
#include <algorithm>
#include <random>
#include <set>

#include "harness.h"
#include "kernels/kernels.h"

namespace m3::bench {
namespace {

using cuda::bf16;

void moe_decode(const Options& opts, bool fp8) {
  const std::string name = fp8 ? "moe_decode_fp8" : "moe_decode";
  const int H = 6144, I = 3072, E = 128, K = 4, G = E + 1;
  const std::vector<int> batches =
      opts.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 4, 8, 16, 32, 64, 128, 256};
  bool any = false;
  for (int B : batches)
    any |= wanted(opts, name, "B=" + std::to_string(B) + " E=128 top-4" + (B <= 32 ? " +shared" : ""));
  if (!any) return;
  Arena a;
  const size_t n13 = size_t(G) * 2 * I * H, n2 = size_t(G) * H * I;
  bf16* w13 = a.get<bf16>(n13);
  bf16* w2 = a.get<bf16>(n2);
  a.fill_bf16(w13, n13, 0.02f, 1);
  a.fill_bf16(w2, n2, 0.02f, 2);
  cuda::Fp8Matrix q13, q2;
  if (fp8) {  // quantised copies of the bf16 slabs (22 GB together)
    uint8_t *q = a.get<uint8_t>(n13 + n13 / 32), *r = a.get<uint8_t>(n2 + n2 / 32);
    cuda::quantize_mxfp8(w13, int64_t(G) * 2 * I, H, q, q + n13, nullptr);
    cuda::quantize_mxfp8(w2, int64_t(G) * H, I, r, r + n2, nullptr);
    q13 = {q, q + n13}, q2 = {r, r + n2};
    cudaDeviceSynchronize();
  }
  const int maxB = 256;
  bf16* x = a.get<bf16>(size_t(maxB) * H);
  a.fill_bf16(x, size_t(maxB) * H, 1.0f, 3);
  int32_t* ids = a.get<int32_t>(maxB * K);
  float* w = a.get<float>(maxB * K);
  int32_t *counts = a.get<int32_t>(G), *offsets = a.get<int32_t>(G + 1), *rank = a.get<int32_t>(maxB * K);
  int32_t* slot_token = a.get<int32_t>(maxB * (K + 1));
  int32_t* active = a.get<int32_t>(G);
  bf16* act = a.get<bf16>(size_t(maxB) * (K + 1) * I);
  float* y = a.get<float>(size_t(maxB) * (K + 1) * H);
  float* out = a.get<float>(size_t(maxB) * H);
  std::mt19937 rng(5);
  for (int B : batches) {
    const bool shared = B <= 32;  // as the model does: beyond one GEMV pass the shared expert is a dense GEMM
    const std::string shape = "B=" + std::to_string(B) + " E=128 top-4" + (shared ? " +shared" : "");
    if (!wanted(opts, "moe_decode", shape)) continue;
    std::vector<int32_t> hid(size_t(B) * K);
    std::vector<float> hw(size_t(B) * K, 0.25f);
    std::set<int32_t> distinct;
    for (int t = 0; t < B; ++t) {
      std::vector<int32_t> e(E);
      for (int i = 0; i < E; ++i) e[i] = i;
      std::shuffle(e.begin(), e.end(), rng);
      for (int j = 0; j < K; ++j) distinct.insert(hid[size_t(t) * K + j] = e[j]);
    }
    cudaMemcpy(ids, hid.data(), hid.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice);
    cudaStream_t s = nullptr;
    Measurement m;
    m.kernel = name;
    m.shape = shape;
    m.us = time_us(
        [&](cudaStream_t st) {
          cuda::moe_group(ids, B, K, {0, E}, shared, counts, offsets, rank, slot_token, active, st);
          cuda::grouped_gemv(w13, q13, int64_t(2) * I * H, G, 2 * I, H, x, H, slot_token, counts, offsets,
                             active, B * K + 1, B, true, 1.702f, 7.0f, act, st);
          cuda::grouped_gemv(w2, q2, int64_t(H) * I, G, H, I, act, I, nullptr, counts, offsets, active,
                             B * K + 1, B, false, 0, 0, y, st);
          cuda::moe_combine(y, ids, w, rank, offsets, B, K, H, 2.0f, shared ? nullptr : out, shared, {0, E},
                            out, nullptr, st);
        },
        s, opts.iters);
    m.bytes = double(distinct.size() + shared) * 3.0 * I * H * (fp8 ? 1.0 + 1.0 / 32 : 2.0);
    m.flops = 2.0 * 3.0 * I * H * B * (K + shared);
    m.note = std::to_string(distinct.size()) + " experts" +
             (shared ? " + shared" : " (shared expert: dense GEMM)");
    report(m);
  }
}

M3_BENCH(moe_decode) {
  moe_decode(opts, /*fp8=*/false);
  moe_decode(opts, /*fp8=*/true);
}

}  // namespace
}  // namespace m3::bench
