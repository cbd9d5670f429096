// Host MXFP8 quantisation (see mxfp8.h).
#include "loader/mxfp8.h"

#include <algorithm>
#include <cmath>

#include "loader/dtype.h"

namespace m3 {

uint8_t f32_to_f8e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7f;
  const float a = std::fabs(f);
  if (a >= 464.0f) return sign | 0x7e;  // 448 is the largest finite value; 464 and up would round past it
  if (a < 0x1p-6f) {                    // subnormal: multiples of 2^-9 (rounding up to 8 gives 2^-6, 0x08)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  std::frexp(a, &e);  // a = m x 2^e, m in [0.5, 1): a in [2^(e-1), 2^e)
  int exp = e - 1;
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exp)));  // 8..16 eighths of 2^exp
  if (q == 16) q = 8, ++exp;
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | (q - 8));
}

uint8_t mxfp8_scale_for(float amax) {
  if (amax == 0.0f) return 127;
  int e = 0;
  const float m = std::frexp(amax, &e);  // amax = m x 2^e; 448 = 0.875 x 2^9
  const int x = m <= 0.875f ? e - 9 : e - 8;
  return static_cast<uint8_t>(std::clamp(x + 127, 0, 254));
}

bool quantize_mxfp8_row(const float* x, int64_t cols, uint8_t* w, uint8_t* s) {
  for (int64_t b = 0; b < cols; b += kMxfp8Block) {
    float amax = 0.0f;
    for (int64_t c = b; c < b + kMxfp8Block; ++c) {
      if (!std::isfinite(x[c])) return false;
      amax = std::max(amax, std::fabs(x[c]));
    }
    const uint8_t scale = mxfp8_scale_for(amax);
    s[b / kMxfp8Block] = scale;
    for (int64_t c = b; c < b + kMxfp8Block; ++c) w[c] = f32_to_f8e4m3(std::ldexp(x[c], 127 - int(scale)));
  }
  return true;
}

bool round_trip_mxfp8_row(float* x, int64_t cols) {
  uint8_t w[kMxfp8Block], s = 0;
  for (int64_t b = 0; b < cols; b += kMxfp8Block) {
    if (!quantize_mxfp8_row(x + b, kMxfp8Block, w, &s)) return false;
    for (int c = 0; c < kMxfp8Block; ++c) x[b + c] = f8e4m3_to_f32(w[c]) * e8m0_to_f32(s);
  }
  return true;
}

void round_trip_fp8_vector(float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax > 0.0f && std::isfinite(amax) ? amax / kE4m3Max : 1.0f;
  for (int64_t i = 0; i < n; ++i) x[i] = f8e4m3_to_f32(f32_to_f8e4m3(x[i] / scale)) * scale;
}

}  // namespace m3
