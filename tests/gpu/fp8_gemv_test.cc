// The GEMVs with MXFP8 weights against a host reference on the dequantised weights: the dense linear GEMV
// (decode-sized linear layers, bf16 and fp8; K split over a CTA's warps or not) and the grouped expert GEMV
// (SwiGLU-OAI gate/up and the down projection) over groups of 0..40 tokens, with scales spread over
// 2^-20..2^3 and e4m3 subnormals in use.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/kernels.h"
#include "loader/dtype.h"
#include "loader/mxfp8.h"

namespace m3 {
namespace {

using cuda::bf16;

// Random MXFP8 rows [rows, K] and their dequantised values.
struct Mx {
  std::vector<uint8_t> q, s;
  std::vector<float> deq;
};
Mx random_mx(int64_t rows, int K, std::mt19937& rng) {
  std::normal_distribution<float> n;
  Mx m;
  m.q.resize(size_t(rows) * K), m.s.resize(size_t(rows) * K / 32), m.deq.resize(size_t(rows) * K);
  std::vector<float> row(K);
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < K; ++k) {
      // magnitudes vary by block, with a few tiny values that land on e4m3 subnormals
      const int block_exp = int((r * 7 + k / 32) % 24) - 20;
      row[k] = n(rng) * std::ldexp(1.0f, block_exp) * (k % 11 == 0 ? 1e-3f : 1.0f);
    }
    EXPECT_TRUE(quantize_mxfp8_row(row.data(), K, &m.q[size_t(r) * K], &m.s[size_t(r) * K / 32]));
    for (int k = 0; k < K; ++k)
      m.deq[size_t(r) * K + k] =
          f8e4m3_to_f32(m.q[size_t(r) * K + k]) * e8m0_to_f32(m.s[size_t(r) * K / 32 + k / 32]);
  }
  return m;
}

std::vector<bf16> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d;
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(rng) * scale);
  return v;
}

// |got - want| <= tol x (sum of |terms|), the bound of fp32 accumulation in any order.
void expect_dot(float got, double want, double abs_terms, const std::string& where) {
  EXPECT_LE(std::fabs(got - want), 1e-5 * abs_terms + 1e-30) << where << " got " << got << " want " << want;
}

class LinearGemv : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(LinearGemv, MatchesHost) {
  M3_REQUIRE_GPU();
  const auto [T, N, K, fp8] = GetParam();
  std::mt19937 rng(T * 1000 + N + K + fp8);
  const Mx w = random_mx(N, K, rng);
  std::vector<bf16> wb(w.deq.size());
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = __float2bfloat16(w.deq[i]);  // exact: e4m3 x 2^k
  const std::vector<bf16> x = random_bf16(size_t(T) * K, rng);
  DeviceBuffer<uint8_t> dq(w.q), ds(w.s);
  DeviceBuffer<bf16> dw(wb), dx(x);
  DeviceBuffer<float> dy(size_t(T) * N);
  dy.fill_bytes(0xff);
  cuda::linear_gemv(dw.get(), fp8 ? cuda::Fp8Matrix{dq.get(), ds.get()} : cuda::Fp8Matrix{}, N, K, dx.get(),
                    T, dy.get(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = dy.download();
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double want = 0, abs_terms = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(w.deq[size_t(n) * K + k]) * __bfloat162float(x[size_t(t) * K + k]);
        want += p, abs_terms += std::fabs(p);
      }
      expect_dot(y[size_t(t) * N + n], want, abs_terms, "t " + std::to_string(t) + " n " + std::to_string(n));
    }
}

// Few rows: K split over the warps of a CTA; 34,816 rows (2,176 tiles of 16): one warp per tile.
INSTANTIATE_TEST_SUITE_P(Shapes, LinearGemv,
                         ::testing::Combine(::testing::Values(1, 5, 32), ::testing::Values(16, 80, 528),
                                            ::testing::Values(32, 96, 320), ::testing::Bool()));
INSTANTIATE_TEST_SUITE_P(ManyRows, LinearGemv,
                         ::testing::Combine(::testing::Values(3, 20), ::testing::Values(34816),
                                            ::testing::Values(64), ::testing::Bool()));

TEST(GroupedGemvFp8, SwigluAndDownMatchHost) {
  M3_REQUIRE_GPU();
  const int G = 5, H = 96, I = 64;  // gate/up [2I, H] interleaved in blocks of 8, down [H, I]
  const float alpha = 1.702f, limit = 7.0f;
  const std::vector<int> counts = {3, 0, 40, 1, 9};  // 40: several GEMV passes
  std::vector<int> offsets = {0};
  for (int c : counts) offsets.push_back(offsets.back() + c);
  const int slots = offsets.back();
  std::mt19937 rng(11);
  const Mx w13 = random_mx(int64_t(G) * 2 * I, H, rng), w2 = random_mx(int64_t(G) * H, I, rng);
  std::vector<int32_t> slot_token(slots);
  const int T = 17;
  for (int i = 0; i < slots; ++i) slot_token[i] = int32_t(rng() % T);
  const std::vector<bf16> x = random_bf16(size_t(T) * H, rng, 4e3f);
  DeviceBuffer<uint8_t> q13(w13.q), s13(w13.s), q2(w2.q), s2(w2.s);
  DeviceBuffer<bf16> dx(x), act(size_t(slots) * I);
  DeviceBuffer<float> y(size_t(slots) * H);
  DeviceBuffer<int32_t> dcounts(std::vector<int32_t>(counts.begin(), counts.end())),
      doffsets(std::vector<int32_t>(offsets.begin(), offsets.end())), dslot(slot_token);
  y.fill_bytes(0xff);
  cuda::grouped_gemv(nullptr, {q13.get(), s13.get()}, int64_t(2) * I * H, G, 2 * I, H, dx.get(), H,
                     dslot.get(), dcounts.get(), doffsets.get(), nullptr, 0, 40, true, alpha, limit,
                     act.get(), nullptr);
  cuda::grouped_gemv(nullptr, {q2.get(), s2.get()}, int64_t(H) * I, G, H, I, act.get(), I, nullptr,
                     dcounts.get(), doffsets.get(), nullptr, 0, 40, false, 0, 0, y.get(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<bf16> a = act.download();
  const std::vector<float> out = y.download();
  for (int g = 0; g < G; ++g)
    for (int i = offsets[g]; i < offsets[g + 1]; ++i) {
      const bf16* xr = &x[size_t(slot_token[i]) * H];
      for (int u = 0; u < I; ++u) {  // unit u: gate row 16 (u / 8) + u % 8, up row + 8
        const size_t gate_row = size_t(g) * 2 * I + 16 * (u / 8) + u % 8, up_row = gate_row + 8;
        double gate = 0, up = 0, abs_terms = 0;
        for (int k = 0; k < H; ++k) {
          const double pg = double(w13.deq[gate_row * H + k]) * __bfloat162float(xr[k]);
          const double pu = double(w13.deq[up_row * H + k]) * __bfloat162float(xr[k]);
          gate += pg, up += pu, abs_terms += std::fabs(pg) + std::fabs(pu);
        }
        const double gc = std::min(gate, double(limit)),
                     uc = std::max(-double(limit), std::min(up, double(limit)));
        const double want = (uc + 1.0) * gc / (1.0 + std::exp(-alpha * gc));
        // bf16 rounding of the output, plus fp32 accumulation error times the SwiGLU slope (<= limit + 2)
        EXPECT_NEAR(__bfloat162float(a[size_t(i) * I + u]), want, 8e-3 * std::fabs(want) + 1e-4 * abs_terms)
            << "slot " << i << " unit " << u;
      }
      for (int n = 0; n < H; ++n) {  // the down projection of the kernel's own act row
        double want = 0, abs_terms = 0;
        for (int k = 0; k < I; ++k) {
          const double p =
              double(w2.deq[(size_t(g) * H + n) * I + k]) * __bfloat162float(a[size_t(i) * I + k]);
          want += p, abs_terms += std::fabs(p);
        }
        expect_dot(out[size_t(i) * H + n], want, abs_terms, "down slot " + std::to_string(i));
      }
    }
}

}  // namespace
}  // namespace m3
