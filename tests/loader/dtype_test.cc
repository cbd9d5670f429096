// Bit-level decoding of every float format the loader accepts, on known values.
#include <gtest/gtest.h>

#include <cmath>

#include "loader/dtype.h"

namespace m3 {
namespace {

TEST(DType, Bf16) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x3fc0), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80) << "ties round to even";
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, Fp16) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24)) << "smallest subnormal";
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);    // exp 7, man 0
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);  // largest finite
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9)) << "smallest subnormal";
  EXPECT_EQ(f8e4m3_to_f32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  EXPECT_EQ(f8e4m3_to_f32(0x80), 0.0f);
}

TEST(DType, E8M0Scales) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(DType, ParseAndSizes) {
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
  EXPECT_FALSE(parse_dtype("F4").has_value());
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  float out[2];
  const uint8_t bytes[2] = {1, 2};
  EXPECT_ANY_THROW(convert_to_f32(DType::kU8, bytes, 2, out));
}

}  // namespace
}  // namespace m3
