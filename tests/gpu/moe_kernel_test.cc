// The MoE kernels against a CPU computation on fresh random inputs: stable grouping by expert (with and
// without the shared group, and the active-group list), the grouped tensor-core GEMV (SwiGLU-OAI on the
// interleaved gate/up layout, then the down projection), the gather for per-expert GEMMs and the routed
// combine, for batch sizes across one and several passes of the GEMV (1..70 tokens per expert) and hidden /
// intermediate widths that are not multiples of 32; with expert parallelism (a rank's range of the experts:
// pairs of other ranks' experts skipped, local experts with skewed or no load); and the one-launch router +
// routing + grouping of small batches against the separate launches.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "gpu/gpu_util.h"
#include "kernels/kernels.h"

namespace m3 {
namespace {

using cuda::bf16;

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T));
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> v(n);
  cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}
double swiglu(double g, double u, double alpha, double limit) {
  g = std::min(g, limit);
  u = std::max(-limit, std::min(u, limit));
  return (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
}

struct Case {
  int T, E, k, H, I;
  bool shared;
  int first = 0, local = 0;  // the experts held here: [first, first + local); local 0: all of them
};

class MoeKernels : public ::testing::TestWithParam<Case> {};

TEST_P(MoeKernels, MatchCpu) {
  M3_REQUIRE_GPU();
  const auto [T, E, k, H, I, shared, first, local_count] = GetParam();
  const cuda::ExpertRange local{first, local_count > 0 ? local_count : E};
  const int EL = local.count;
  auto group_of = [&](int e) { return e >= first && e < first + EL ? e - first : -1; };
  const float alpha = 1.702f, limit = 7.0f, scale = 2.0f;
  std::mt19937 rng(T * 131 + E * 7 + H + shared);
  std::normal_distribution<float> n;
  // Skewed routing: expert 0 is in most tokens' top-k so one group spans several GEMV passes.
  std::vector<int32_t> ids(size_t(T) * k);
  std::vector<float> w(size_t(T) * k);
  for (int t = 0; t < T; ++t) {
    std::vector<int> e(E);
    for (int i = 0; i < E; ++i) e[i] = i;
    std::shuffle(e.begin(), e.end(), rng);
    if (rng() % 4 != 0) std::swap(e[0], *std::find(e.begin(), e.end(), 0));
    for (int j = 0; j < k; ++j)
      ids[size_t(t) * k + j] = e[j], w[size_t(t) * k + j] = 0.1f + (rng() % 100) / 100.f;
  }
  const int G = EL + (shared ? 1 : 0);
  std::vector<bf16> x(size_t(T) * H), w13(size_t(G) * 2 * I * H), w2(size_t(G) * H * I);
  for (auto& v : x) v = __float2bfloat16(n(rng));
  for (auto& v : w13) v = __float2bfloat16(n(rng) * 3.0f / std::sqrt(float(H)));  // some gates hit the clamp
  for (auto& v : w2) v = __float2bfloat16(n(rng) / std::sqrt(float(I)));

  int32_t *d_counts, *d_offsets, *d_rank, *d_slot_token, *d_active;
  cudaMalloc(&d_counts, G * 4), cudaMalloc(&d_offsets, (G + 1) * 4), cudaMalloc(&d_rank, T * k * 4);
  cudaMalloc(&d_active, G * 4);
  cudaMalloc(&d_slot_token, T * (k + 1) * 4);
  int32_t* d_ids = upload(ids);
  float* d_w = upload(w);
  bf16 *d_x = upload(x), *d_w13 = upload(w13), *d_w2 = upload(w2);
  cudaMemset(d_slot_token, 0xff, T * (k + 1) * 4);
  cuda::moe_group(d_ids, T, k, local, shared, d_counts, d_offsets, d_rank, d_slot_token, d_active, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Grouping: stable in pair order.
  std::vector<int> counts(G, 0), rank(size_t(T) * k);
  for (int p = 0; p < T * k; ++p) rank[p] = group_of(ids[p]) >= 0 ? counts[group_of(ids[p])]++ : -1;
  if (shared) counts[EL] = T;
  std::vector<int> offsets(G + 1, 0);
  for (int e = 0; e < G; ++e) offsets[e + 1] = offsets[e] + counts[e];
  EXPECT_EQ(download(d_counts, G), std::vector<int32_t>(counts.begin(), counts.end()));
  EXPECT_EQ(download(d_offsets, G + 1), std::vector<int32_t>(offsets.begin(), offsets.end()));
  EXPECT_EQ(download(d_rank, size_t(T) * k), std::vector<int32_t>(rank.begin(), rank.end()));
  std::vector<int32_t> active;
  for (int e = 0; e < G; ++e)
    if (counts[e] > 0) active.push_back(e);
  const int n_active = int(active.size());
  active.resize(G, -1);
  EXPECT_EQ(download(d_active, G), active);
  const int slots = offsets[G];
  std::vector<int> slot_token(slots);
  for (int p = 0; p < T * k; ++p)
    if (group_of(ids[p]) >= 0) slot_token[offsets[group_of(ids[p])] + rank[p]] = p / k;
  for (int t = 0; t < T && shared; ++t) slot_token[offsets[EL] + t] = t;
  EXPECT_EQ(download(d_slot_token, slots), std::vector<int32_t>(slot_token.begin(), slot_token.end()));

  // Grouped GEMVs: act (bf16) then y (fp32).
  bf16* d_act;
  float *d_y, *d_out;
  cudaMalloc(&d_act, size_t(slots) * I * 2), cudaMalloc(&d_y, size_t(slots) * H * 4);
  cudaMalloc(&d_out, size_t(T) * H * 4);
  cudaMemset(d_out, 0xff, size_t(T) * H * 4);
  // The gate/up GEMV over the active list with its exact bound, the down GEMV over every group (both forms).
  cuda::grouped_gemv(d_w13, {}, int64_t(2) * I * H, G, 2 * I, H, d_x, H, d_slot_token, d_counts, d_offsets,
                     d_active, n_active, T, true, alpha, limit, d_act, nullptr);
  cuda::grouped_gemv(d_w2, {}, int64_t(H) * I, G, H, I, d_act, I, nullptr, d_counts, d_offsets, nullptr, 0, T,
                     false, 0, 0, d_y, nullptr);
  std::vector<float> shared_rows;
  float* d_shared = nullptr;
  if (!shared) {  // an explicit shared-expert output, as the large-batch path passes it
    shared_rows.resize(size_t(T) * H);
    for (auto& v : shared_rows) v = n(rng);
    d_shared = upload(shared_rows);
  }
  unsigned long long* d_tokens;
  cudaMalloc(&d_tokens, E * 8), cudaMemset(d_tokens, 0, E * 8);
  cuda::moe_combine(d_y, d_ids, d_w, d_rank, d_offsets, T, k, H, scale, d_shared, shared, local, d_out,
                    d_tokens, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<bf16> act = download(d_act, size_t(slots) * I);
  const std::vector<float> y = download(d_y, size_t(slots) * H), out = download(d_out, size_t(T) * H);

  // CPU: act from the bf16 inputs in double; y from the kernel's own bf16 act (isolates each GEMV).
  double act_err = 0, y_err = 0, out_err = 0;
  for (int e = 0; e < G; ++e)
    for (int i = 0; i < counts[e]; ++i) {
      const int slot = offsets[e] + i, tok = slot_token[slot];
      for (int u = 0; u < I; ++u) {
        const int rg = (u / 8) * 16 + u % 8, ru = rg + 8;
        double g = 0, up = 0;
        for (int c = 0; c < H; ++c) {
          const double xv = __bfloat162float(x[size_t(tok) * H + c]);
          g += xv * __bfloat162float(w13[(size_t(e) * 2 * I + rg) * H + c]);
          up += xv * __bfloat162float(w13[(size_t(e) * 2 * I + ru) * H + c]);
        }
        const double ref = swiglu(g, up, alpha, limit);
        act_err = std::max(act_err,
                           std::abs(__bfloat162float(act[size_t(slot) * I + u]) - ref) / (1 + std::abs(ref)));
      }
      for (int r = 0; r < H; ++r) {
        double acc = 0;
        for (int u = 0; u < I; ++u)
          acc += double(__bfloat162float(act[size_t(slot) * I + u])) *
                 __bfloat162float(w2[(size_t(e) * H + r) * I + u]);
        y_err = std::max(y_err, std::abs(y[size_t(slot) * H + r] - acc) / (1 + std::abs(acc)));
      }
    }
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H; ++c) {
      std::vector<std::pair<int, int>> order;
      for (int j = 0; j < k; ++j)
        if (group_of(ids[size_t(t) * k + j]) >= 0) order.push_back({ids[size_t(t) * k + j], j});
      std::sort(order.begin(), order.end());
      double acc = 0;
      for (auto [e, j] : order)
        acc +=
            double(y[size_t(offsets[group_of(e)] + rank[size_t(t) * k + j]) * H + c]) * w[size_t(t) * k + j];
      const double sh = shared ? y[size_t(offsets[EL] + t) * H + c] : shared_rows[size_t(t) * H + c];
      const double ref = acc * scale + sh;
      out_err = std::max(out_err, std::abs(out[size_t(t) * H + c] - ref) / (1 + std::abs(ref)));
    }
  // bf16 rounding of act is the only rounding on the kernel's side (half an ulp: 2^-9 relative).
  EXPECT_LT(act_err, 4e-3) << "SwiGLU GEMV";
  EXPECT_LT(y_err, 1e-4) << "down GEMV";
  EXPECT_LT(out_err, 1e-5) << "combine";
  std::vector<unsigned long long> tokens_ref(E, 0);
  for (int32_t e : ids) ++tokens_ref[e];
  EXPECT_EQ(download(d_tokens, E), tokens_ref) << "every pair counted, local or not";
  cudaFree(d_tokens);

  // The gather puts each pair's token row at offsets[e] + rank (the per-expert GEMMs' rows).
  bf16* d_xc;
  cudaMalloc(&d_xc, size_t(T) * k * H * 2);
  cuda::moe_gather(d_x, d_ids, d_rank, d_offsets, T, k, H, local, d_xc, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<bf16> xc = download(d_xc, size_t(T) * k * H);
  int bad = 0;
  for (int p = 0; p < T * k; ++p)
    for (int c = 0; c < H && group_of(ids[p]) >= 0; ++c)
      bad += __bfloat162float(xc[(size_t(offsets[group_of(ids[p])]) + rank[p]) * H + c]) !=
             __bfloat162float(x[size_t(p / k) * H + c]);
  EXPECT_EQ(bad, 0) << "gather";
  for (void* p : {(void*)d_counts, (void*)d_offsets, (void*)d_rank, (void*)d_slot_token, (void*)d_ids,
                  (void*)d_w, (void*)d_x, (void*)d_w13, (void*)d_w2, (void*)d_act, (void*)d_y, (void*)d_out,
                  (void*)d_xc, (void*)d_active, (void*)d_shared})
    cudaFree(p);
}

// The router against the CPU rule: sigmoid scores, choice = score + bias, top-k by choice (ties to the lower
// id), weights = scores renormalised over the chosen. Coarse logits make ties common; E up to 256.
TEST(MoeRoute, MatchesCpuRule) {
  M3_REQUIRE_GPU();
  for (const auto& [T, E, k] :
       {std::tuple{1, 8, 2}, std::tuple{37, 128, 4}, std::tuple{300, 256, 8}, std::tuple{5, 16, 16}}) {
    std::mt19937 rng(T * 7 + E);
    std::vector<float> logits(size_t(T) * E), bias(E);
    for (auto& v : logits) v = float(int(rng() % 9) - 4) / 2.0f;  // ties
    for (auto& v : bias) v = float(int(rng() % 5)) / 8.0f;
    float *d_logits = upload(logits), *d_bias = upload(bias), *d_w;
    int32_t* d_ids;
    cudaMalloc(&d_ids, size_t(T) * k * 4), cudaMalloc(&d_w, size_t(T) * k * 4);
    cuda::moe_route(d_logits, d_bias, T, E, k, d_ids, d_w, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> ids = download(d_ids, size_t(T) * k);
    const std::vector<float> w = download(d_w, size_t(T) * k);
    for (int t = 0; t < T; ++t) {
      std::vector<int> order(E);
      std::vector<float> score(E), choice(E);
      for (int e = 0; e < E; ++e) {
        order[e] = e;
        score[e] = 1.0f / (1.0f + std::exp(-logits[size_t(t) * E + e]));
        choice[e] = score[e] + bias[e];
      }
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return choice[a] != choice[b] ? choice[a] > choice[b] : a < b; });
      float total = 0;
      for (int r = 0; r < k; ++r) total += score[order[r]];
      for (int r = 0; r < k; ++r) {
        ASSERT_EQ(ids[size_t(t) * k + r], order[r])
            << "T=" << T << " E=" << E << " token " << t << " rank " << r;
        EXPECT_NEAR(w[size_t(t) * k + r], score[order[r]] / total, 1e-6) << "token " << t << " rank " << r;
      }
    }
    cudaFree(d_logits), cudaFree(d_bias), cudaFree(d_ids), cudaFree(d_w);
  }
}

// The one-launch small-batch path: its logits against a CPU dot product in double, and its routing and
// grouping exactly equal to moe_route + moe_group run on those logits; launched twice on one ticket (the
// ticket must come back to 0) and with and without the shared group.
TEST(MoeRouteGroup, MatchesTheSeparateLaunches) {
  M3_REQUIRE_GPU();
  unsigned* d_ticket;
  cudaMalloc(&d_ticket, 4), cudaMemset(d_ticket, 0, 4);
  for (const auto& [T, E, k, H, shared, local] :
       {std::tuple{1, 128, 4, 6144, true, cuda::ExpertRange{0, 128}},
        std::tuple{32, 128, 4, 256, false, cuda::ExpertRange{0, 128}},
        std::tuple{7, 40, 6, 96, true, cuda::ExpertRange{0, 40}},
        std::tuple{3, 256, 8, 64, false, cuda::ExpertRange{0, 256}},
        std::tuple{32, 128, 4, 256, true, cuda::ExpertRange{64, 32}},  // expert parallelism: rank 2 of 4
        std::tuple{5, 128, 4, 6144, false, cuda::ExpertRange{0, 16}}}) {
    std::mt19937 rng(T * 11 + E + H);
    std::normal_distribution<float> n;
    std::vector<float> x(size_t(T) * H), router(size_t(E) * H), bias(E);
    for (auto& v : x) v = n(rng);
    for (auto& v : router) v = n(rng) / std::sqrt(float(H));
    for (auto& v : bias) v = float(int(rng() % 5)) / 64.0f;
    const int G = local.count + (shared ? 1 : 0);
    float *d_x = upload(x), *d_router = upload(router), *d_bias = upload(bias), *d_logits, *d_w, *d_w2;
    int32_t *d_ids, *d_ids2, *d_a[5], *d_b[5];
    cudaMalloc(&d_logits, size_t(T) * E * 4), cudaMalloc(&d_w, size_t(T) * k * 4),
        cudaMalloc(&d_w2, T * k * 4);
    cudaMalloc(&d_ids, size_t(T) * k * 4), cudaMalloc(&d_ids2, size_t(T) * k * 4);
    const size_t sizes[5] = {size_t(G), size_t(G) + 1, size_t(T) * k, size_t(T) * (k + 1), size_t(G)};
    for (int i = 0; i < 5; ++i) {
      cudaMalloc(&d_a[i], sizes[i] * 4), cudaMalloc(&d_b[i], sizes[i] * 4);
      cudaMemset(d_a[i], 0xff, sizes[i] * 4), cudaMemset(d_b[i], 0xff, sizes[i] * 4);
    }
    for (int launch = 0; launch < 2; ++launch)
      cuda::moe_route_group(d_x, d_router, d_bias, T, H, E, k, local, shared, d_logits, d_ids, d_w, d_a[0],
                            d_a[1], d_a[2], d_a[3], d_a[4], d_ticket, nullptr);
    cuda::moe_route(d_logits, d_bias, T, E, k, d_ids2, d_w2, nullptr);
    cuda::moe_group(d_ids2, T, k, local, shared, d_b[0], d_b[1], d_b[2], d_b[3], d_b[4], nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string what = "T=" + std::to_string(T) + " E=" + std::to_string(E) + " H=" + std::to_string(H);
    EXPECT_EQ(download(d_ticket, 1)[0], 0u) << what;
    const std::vector<float> logits = download(d_logits, size_t(T) * E);
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < E; ++e) {
        double ref = 0, mag = 0;
        for (int i = 0; i < H; ++i) {
          ref += double(x[size_t(t) * H + i]) * router[size_t(e) * H + i];
          mag += std::fabs(double(x[size_t(t) * H + i]) * router[size_t(e) * H + i]);
        }
        ASSERT_NEAR(logits[size_t(t) * E + e], ref, 1e-5 * mag + 1e-7)
            << what << " token " << t << " expert " << e;
      }
    EXPECT_EQ(download(d_ids, size_t(T) * k), download(d_ids2, size_t(T) * k)) << what;
    EXPECT_EQ(download(d_w, size_t(T) * k), download(d_w2, size_t(T) * k)) << what;
    const int slots = download(d_b[1], G + 1)[G];
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(download(d_a[i], i == 3 ? size_t(slots) : sizes[i]),
                download(d_b[i], i == 3 ? size_t(slots) : sizes[i]))
          << what << " grouping output " << i;
    for (void* p : {(void*)d_x, (void*)d_router, (void*)d_bias, (void*)d_logits, (void*)d_w, (void*)d_w2,
                    (void*)d_ids, (void*)d_ids2})
      cudaFree(p);
    for (int i = 0; i < 5; ++i) cudaFree(d_a[i]), cudaFree(d_b[i]);
  }
  cudaFree(d_ticket);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeKernels,
                         ::testing::Values(Case{1, 8, 2, 64, 32, true}, Case{5, 16, 4, 64, 48, false},
                                           Case{37, 8, 2, 96, 40, true}, Case{20, 4, 2, 64, 32, true},
                                           Case{70, 128, 4, 256, 64, true}, Case{300, 16, 4, 128, 32, false},
                                           // Expert parallelism: one rank's experts of 4 (expert 0, the
                                           // hot one, elsewhere or here), some local experts with no pairs.
                                           Case{37, 16, 2, 96, 40, true, 4, 4},
                                           Case{70, 128, 4, 256, 64, false, 0, 32},
                                           Case{5, 128, 4, 64, 32, true, 96, 32},
                                           Case{300, 16, 4, 128, 32, true, 12, 4}));

}  // namespace
}  // namespace m3
