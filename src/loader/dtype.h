// Element types found in safetensors files and their conversion to fp32. fp8-e4m3 follows the OCP "fn"
// variant (no infinities, 0x7f/0xff are NaN); e8m0 is a bare biased exponent (2^(e-127)), used by MXFP8
// scales.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace m3 {

enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI64, kI32, kI16, kI8, kU8, kBool };

std::optional<DType> parse_dtype(const std::string& name);  // safetensors spelling: "BF16", "F8_E4M3", ...
const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
float f8e4m3_to_f32(uint8_t v);
float f8e5m2_to_f32(uint8_t v);
inline float e8m0_to_f32(uint8_t e) {
  return e == 0xff ? __builtin_nanf("") : std::ldexp(1.0f, int(e) - 127);
}

// Converts `count` elements of a float dtype starting at `src` to fp32 (throws for non-float dtypes).
void convert_to_f32(DType t, const void* src, size_t count, float* dst);

}  // namespace m3
