// Decoding of the small float formats by bit manipulation (exact: every value of these formats is an fp32).
#include "loader/dtype.h"

#include <cmath>

#include "common/error.h"

namespace m3 {

std::optional<DType> parse_dtype(const std::string& n) {
  if (n == "F64") return DType::kF64;
  if (n == "F32") return DType::kF32;
  if (n == "F16") return DType::kF16;
  if (n == "BF16") return DType::kBF16;
  if (n == "F8_E4M3") return DType::kF8E4M3;
  if (n == "F8_E5M2") return DType::kF8E5M2;
  if (n == "I64") return DType::kI64;
  if (n == "I32") return DType::kI32;
  if (n == "I16") return DType::kI16;
  if (n == "I8") return DType::kI8;
  if (n == "U8") return DType::kU8;
  if (n == "BOOL") return DType::kBool;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF64:
      return "F64";
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kF8E5M2:
      return "F8_E5M2";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kI16:
      return "I16";
    case DType::kI8:
      return "I8";
    case DType::kU8:
      return "U8";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    default:
      return 1;
  }
}

bool dtype_is_float(DType t) {
  return t == DType::kF64 || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
         t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

float f16_to_f32(uint16_t h) {
  int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);  // subnormal (or zero)
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return sign ? -v : v;
}

float f8e4m3_to_f32(uint8_t b) {
  int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 0x7;
  float v;
  if (exp == 0xf && man == 0x7)
    v = NAN;  // e4m3fn: the only NaN, no infinities
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -9);  // subnormal: man * 2^-3 * 2^-6
  else
    v = std::ldexp(static_cast<float>(man | 0x8), exp - 10);  // (1 + man/8) * 2^(exp-7)
  return sign ? -v : v;
}

float f8e5m2_to_f32(uint8_t b) {
  return f16_to_f32(static_cast<uint16_t>(b) << 8);
}

void convert_to_f32(DType t, const void* src, size_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kF64: {
      const double* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(s[i]);
      return;
    }
    case DType::kF8E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8e5m2_to_f32(s[i]);
      return;
    }
    default:
      fail(ErrorKind::kUnsupported, std::string("cannot convert dtype ") + dtype_name(t) + " to fp32");
  }
}

}  // namespace m3
