// MXFP8 on the host: fp8-e4m3 rounding, the block quantisation m3serve applies to bf16 weights when asked
// for FP8 (`--quantization fp8`), and the per-vector rounding of an FP8 KV cache. One scale per 32
// consecutive inputs of a row, a power of two stored as an e8m0 byte (the MXFP8 checkpoint's own format, so
// one set of kernels serves both). The scale is the smallest power of two that brings the block's largest
// magnitude within e4m3's 448 (no value saturates; the OCP MX rule floor(log2 amax) - 8 would clip the top of
// each block); the values round to nearest even. The device quantiser (kernels/fp8.h) is bit-identical to
// this one.
#pragma once

#include <cstdint>

namespace m3 {

constexpr int kMxfp8Block = 32;
constexpr float kE4m3Max = 448.0f;

// fp32 -> fp8-e4m3 ("fn": no infinities), round to nearest even, saturating at +-448; NaN -> 0x7f (sign
// kept).
uint8_t f32_to_f8e4m3(float f);

// The e8m0 scale byte of a block whose largest magnitude is `amax` (finite, >= 0): 127 + the smallest X with
// amax <= 448 x 2^X, clamped to [0, 254]; an all-zero block gets 127.
uint8_t mxfp8_scale_for(float amax);

// Quantises one row of `cols` values (cols % 32 == 0): w[c] = e4m3(x[c] / 2^(s[c / 32] - 127)). Returns false
// (leaving the outputs unspecified) if a value is not finite.
bool quantize_mxfp8_row(const float* x, int64_t cols, uint8_t* w, uint8_t* s);

// In place: x[c] = dequant(quant(x[c])), the values FP8 weights hold. Returns false if a value is not finite.
bool round_trip_mxfp8_row(float* x, int64_t cols);

// In place: the values an FP8 KV cache holds for one head's vector: e4m3(x / s) x s with the vector's own
// fp32 scale s = amax / 448 (1 for an all-zero vector), computed as written, so no calibration is needed and
// V's range (not normalised) is safe. Non-finite values stay non-finite.
void round_trip_fp8_vector(float* x, int64_t n);

}  // namespace m3
