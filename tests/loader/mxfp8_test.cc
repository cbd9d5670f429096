// Host MXFP8 quantisation: e4m3 rounding against the decoder on every code and every midpoint, the block
// scale at its boundaries, and the quantisation of rows (error bound, all-zero and non-finite blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "loader/dtype.h"
#include "loader/mxfp8.h"

namespace m3 {
namespace {

TEST(Mxfp8, EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    const float v = f8e4m3_to_f32(uint8_t(b));
    const uint8_t back = f32_to_f8e4m3(v);
    if (v == 0.0f)
      EXPECT_EQ(back & 0x7f, 0) << b;
    else
      EXPECT_EQ(back, b) << "code " << b << " value " << v;
  }
}

TEST(Mxfp8, MidpointsRoundToEvenAndAboveRoundsUp) {
  for (int b = 0; b < 0x7e; ++b) {  // each pair of adjacent positive codes
    const float lo = f8e4m3_to_f32(uint8_t(b)), hi = f8e4m3_to_f32(uint8_t(b + 1));
    const float mid = 0.5f * (lo + hi);
    EXPECT_EQ(f32_to_f8e4m3(mid), (b % 2 == 0) ? b : b + 1) << "tie between " << lo << " and " << hi;
    EXPECT_EQ(f32_to_f8e4m3(std::nextafter(mid, 1e9f)), b + 1) << lo;
    EXPECT_EQ(f32_to_f8e4m3(std::nextafter(mid, 0.0f)), b) << lo;
    EXPECT_EQ(f32_to_f8e4m3(-mid), 0x80 | ((b % 2 == 0) ? b : b + 1));
  }
}

TEST(Mxfp8, SaturatesAndKeepsNan) {
  EXPECT_EQ(f32_to_f8e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(463.9f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00) << "half the smallest subnormal ties to zero";
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.5f, -10)), 0x01);
}

TEST(Mxfp8, ScaleIsTheSmallestPowerOfTwoThatFits) {
  EXPECT_EQ(mxfp8_scale_for(0.0f), 127);
  for (int k = -20; k <= 7; ++k) {
    const float edge = std::ldexp(448.0f, k);
    EXPECT_EQ(mxfp8_scale_for(edge), 127 + k) << "448 x 2^" << k << " fits exactly";
    EXPECT_EQ(mxfp8_scale_for(std::nextafter(edge, 1e30f)), 128 + k);
    EXPECT_EQ(mxfp8_scale_for(std::ldexp(225.0f, k)), 127 + k) << "just above the lower power fits";
    EXPECT_EQ(mxfp8_scale_for(std::ldexp(224.0f, k)), 126 + k);
  }
  EXPECT_EQ(mxfp8_scale_for(1e-44f), 0) << "clamped";
}

TEST(Mxfp8, RowsQuantiseWithinHalfAnE4m3Step) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n;
  std::vector<float> x(256), y;
  for (size_t i = 0; i < x.size(); ++i) x[i] = n(rng) * std::ldexp(1.0f, int(i / 32) * 3 - 12);
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero block
  std::vector<uint8_t> w(x.size()), s(x.size() / 32);
  ASSERT_TRUE(quantize_mxfp8_row(x.data(), int64_t(x.size()), w.data(), s.data()));
  EXPECT_EQ(s[2], 127);
  y = x;
  ASSERT_TRUE(round_trip_mxfp8_row(y.data(), int64_t(y.size())));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t i = b * 32; i < b * 32 + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    EXPECT_LE(amax, 448.0f * e8m0_to_f32(s[b]));
    if (amax > 0) {
      EXPECT_GT(amax, 224.0f * e8m0_to_f32(s[b])) << "not a larger scale than needed";
    }
    for (size_t i = b * 32; i < b * 32 + 32; ++i) {
      EXPECT_EQ(y[i], f8e4m3_to_f32(w[i]) * e8m0_to_f32(s[b]));
      // e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value, or 2^-10 of the scale when subnormal.
      EXPECT_LE(std::fabs(y[i] - x[i]), std::max(std::fabs(x[i]) / 16, std::ldexp(e8m0_to_f32(s[b]), -10)));
    }
  }
  std::vector<float> z = y;
  ASSERT_TRUE(round_trip_mxfp8_row(z.data(), int64_t(z.size())));
  EXPECT_EQ(z, y) << "quantised values are a fixed point";
  x[5] = NAN;
  EXPECT_FALSE(quantize_mxfp8_row(x.data(), int64_t(x.size()), w.data(), s.data()));
  x[5] = INFINITY;
  EXPECT_FALSE(round_trip_mxfp8_row(x.data(), int64_t(x.size())));
}

TEST(Mxfp8, KvVectorsRoundWithTheirOwnScale) {
  std::mt19937 rng(9);
  std::normal_distribution<float> n;
  for (float magnitude : {1e-6f, 3e-2f, 1.0f, 5e3f}) {
    std::vector<float> x(128), y;
    for (auto& v : x) v = n(rng) * magnitude;
    x[17] = 0.0f;
    y = x;
    round_trip_fp8_vector(y.data(), int64_t(y.size()));
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float scale = amax / 448.0f;
    for (size_t i = 0; i < x.size(); ++i) {
      // an e4m3 value times the vector's scale, within half an e4m3 step of the input
      EXPECT_EQ(y[i], f8e4m3_to_f32(f32_to_f8e4m3(x[i] / scale)) * scale) << magnitude << " " << i;
      EXPECT_LE(std::fabs(y[i] - x[i]), std::max(std::fabs(x[i]) / 16, scale * std::ldexp(1.0f, -10)));
    }
    EXPECT_EQ(y[17], 0.0f);
  }
  std::vector<float> zeros(64, 0.0f);
  round_trip_fp8_vector(zeros.data(), 64);
  EXPECT_EQ(zeros, std::vector<float>(64, 0.0f));
}

}  // namespace
}  // namespace m3
