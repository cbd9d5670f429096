// The MXFP8 kernels (kernels/fp8.h) against the host: the device quantiser bit for bit against
// loader/mxfp8.h on blocks chosen to hit every branch (zero blocks, bf16 subnormals, amax exactly 448 x 2^k
// and one step above, the extremes of bf16) and the dequantiser exactly against the host decoding.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/fp8.h"
#include "loader/dtype.h"
#include "loader/mxfp8.h"

namespace m3 {
namespace {

uint16_t bf16_bits(float f) {
  return f32_to_bf16(f);
}

// One block of 32 bf16 values of a kind chosen by `kind`, magnitudes around 2^e.
void fill_block(uint16_t* b, int kind, int e, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (int i = 0; i < 32; ++i) b[i] = bf16_bits(std::ldexp(u(rng), e));
  switch (kind) {
    case 0:  // all zero, some negative zeros
      for (int i = 0; i < 32; ++i) b[i] = (i % 3 == 0) ? 0x8000 : 0;
      break;
    case 1:  // bf16 subnormals only
      for (int i = 0; i < 32; ++i) b[i] = uint16_t(bits(rng) & 0x807f);
      break;
    case 2:  // amax exactly 448 x 2^e (possibly negative)
      b[rng() % 32] = bf16_bits((rng() & 1 ? -448.0f : 448.0f) * std::ldexp(1.0f, e - 8));
      for (int i = 0; i < 32; ++i)
        if (std::fabs(bf16_to_f32(b[i])) > 448.0f * std::ldexp(1.0f, e - 8)) b[i] = 0;
      break;
    case 3: {  // amax one bf16 step above 448 x 2^e
      for (int i = 0; i < 32; ++i) b[i] = bf16_bits(std::ldexp(u(rng), e - 9));
      b[rng() % 32] = uint16_t(bf16_bits(448.0f * std::ldexp(1.0f, e - 8)) + 1);
      break;
    }
    case 4:  // wide dynamic range inside the block: small values underflow e4m3
      for (int i = 0; i < 32; ++i) b[i] = bf16_bits(std::ldexp(u(rng), e - int(rng() % 24)));
      break;
    case 5:  // the largest bf16 magnitudes
      for (int i = 0; i < 32; ++i) b[i] = uint16_t((rng() & 0x8000) | 0x7f00 | (rng() & 0x7f));
      break;
    default:  // random finite bit patterns
      for (int i = 0; i < 32; ++i) {
        uint16_t v;
        do v = uint16_t(bits(rng));
        while ((v & 0x7f80) == 0x7f80);
        b[i] = v;
      }
  }
}

TEST(Fp8Kernels, QuantizeMatchesHostBitForBit) {
  M3_REQUIRE_GPU();
  const int rows = 37, K = 32 * 40;
  std::mt19937 rng(11);
  std::vector<uint16_t> x(size_t(rows) * K);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const int kind = int(rng() % 8), e = int(rng() % 260) - 133;
    fill_block(x.data() + 32 * b, kind, kind == 2 || kind == 3 ? std::clamp(e, -120, 120) : e, rng);
  }
  std::vector<uint8_t> want_w(x.size()), want_s(x.size() / 32);
  std::vector<float> row(K);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < K; ++k) row[k] = bf16_to_f32(x[size_t(r) * K + k]);
    ASSERT_TRUE(
        quantize_mxfp8_row(row.data(), K, want_w.data() + size_t(r) * K, want_s.data() + r * (K / 32)));
  }
  DeviceBuffer<uint16_t> dx(x);
  DeviceBuffer<uint8_t> dw(x.size()), ds(x.size() / 32);
  cuda::quantize_mxfp8(reinterpret_cast<const __nv_bfloat16*>(dx.get()), rows, K, dw.get(), ds.get(),
                       nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto w = dw.download(), s = ds.download();
  int bad = 0;
  for (size_t b = 0; b < s.size(); ++b) {
    bool ok = s[b] == want_s[b];
    for (int i = 0; i < 32; ++i) ok &= w[32 * b + i] == want_w[32 * b + i];
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << "block " << b << ": scale " << int(s[b]) << " want " << int(want_s[b]);
      for (int i = 0; i < 32; ++i)
        if (w[32 * b + i] != want_w[32 * b + i])
          ADD_FAILURE() << "  x bits " << std::hex << x[32 * b + i] << " -> " << int(w[32 * b + i])
                        << " want " << int(want_w[32 * b + i]) << std::dec;
    }
  }
  EXPECT_EQ(bad, 0);
}

uint8_t random_e4m3(std::mt19937& rng) {
  uint8_t b;
  do b = uint8_t(rng());
  while ((b & 0x7f) == 0x7f);
  return b;
}

TEST(Fp8Kernels, DequantizeIsExact) {
  M3_REQUIRE_GPU();
  const int rows = 9, K = 32 * 7;
  std::mt19937 rng(12);
  std::vector<uint8_t> w(size_t(rows) * K), s(size_t(rows) * K / 32);
  for (auto& b : w) b = random_e4m3(rng);
  for (auto& e : s) e = uint8_t(90 + rng() % (cuda::kMaxFp8Scale - 90 + 1));  // up to the largest taken
  DeviceBuffer<uint8_t> dw(w), ds(s);
  DeviceBuffer<uint16_t> dout(w.size());
  cuda::dequantize_mxfp8({dw.get(), ds.get()}, rows, K, reinterpret_cast<__nv_bfloat16*>(dout.get()),
                         nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = dout.download();
  for (size_t i = 0; i < w.size(); ++i) {
    const float want = f8e4m3_to_f32(w[i]) * e8m0_to_f32(s[i / 32]);
    ASSERT_EQ(out[i], f32_to_bf16(want))
        << "element " << i << " byte " << int(w[i]) << " scale " << int(s[i / 32]);
  }
}

}  // namespace
}  // namespace m3
