// The arithmetic the CPU sampler (engine/sampler) and the CUDA sampling kernel (kernels/sampling) share, so
// both follow one rule bit for bit: the counter-based random source, the per-id logit adjustment, the sort
// key that orders logits, and the token probability exp((l - max) / T) with an exp made of plain IEEE
// operations (std::exp and CUDA's exp differ in the last bit). Header-only, host + device. Device code
// uses the _rn intrinsics so nvcc never fuses a multiply-add; host builds rely on the same (x86-64 without
// -mfma never contracts).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "common/random_init.h"

namespace m3 {

// One entry per token id a request adjusts, merged by id (ids distinct within a row).
struct LogitAdjustment {
  int32_t id = 0;
  float bias = 0.0f;         // logit_bias (0: none)
  int32_t output_count = 0;  // times the id was generated so far (frequency / presence / repetition)
  uint8_t in_prompt = 0;     // the id occurs in the prompt (repetition penalty)
  uint8_t banned = 0;        // -inf: EOS / stop ids before min_tokens
};

struct Penalties {
  float repetition = 1.0f;  // > 0; seen ids: l / r if l > 0 else l * r
  float presence = 0.0f;    // minus once for a generated id
  float frequency = 0.0f;   // minus f x times generated
};

// One row to sample: the filters, the uniform draw, the row's entries [adj_begin, adj_end) of the
// adjustment array and, under a grammar, the row of the token-mask array that says which ids it may pick.
// Plain data so a kernel can read it.
struct SamplingRow {
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float min_p = 0.0f;        // [0, 1]
  Penalties penalties;
  double u = 0.0;  // [0, 1)
  int32_t adj_begin = 0;
  int32_t adj_end = 0;
  int32_t mask_row = -1;  // >= 0: ids whose bit is clear in that mask row (token_mask_words words) get -inf
};

// Words of one token-mask row: bit (id % 32) of word (id / 32) set = id allowed.
M3_HOST_DEVICE int32_t token_mask_words(int32_t vocab) {
  return (vocab + 31) / 32;
}
M3_HOST_DEVICE bool token_mask_allows(const uint32_t* row, int32_t id) {
  return (row[id >> 5] >> (id & 31)) & 1u;
}

namespace sampling_detail {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float fadd(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float fsub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ float fmul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float fdiv(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double dadd(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ double dsub(double a, double b) {
  return __dsub_rn(a, b);
}
__device__ __forceinline__ double dmul(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ double ddiv(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ __forceinline__ uint32_t float_bits(float f) {
  return __float_as_uint(f);
}
__device__ __forceinline__ float bits_float(uint32_t b) {
  return __uint_as_float(b);
}
__device__ __forceinline__ double bits_double(uint64_t b) {
  return __longlong_as_double(static_cast<long long>(b));
}
#else
inline float fadd(float a, float b) {
  return a + b;
}
inline float fsub(float a, float b) {
  return a - b;
}
inline float fmul(float a, float b) {
  return a * b;
}
inline float fdiv(float a, float b) {
  return a / b;
}
inline double dadd(double a, double b) {
  return a + b;
}
inline double dsub(double a, double b) {
  return a - b;
}
inline double dmul(double a, double b) {
  return a * b;
}
inline double ddiv(double a, double b) {
  return a / b;
}
inline uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
inline float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline double bits_double(uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
#endif

}  // namespace sampling_detail

// The draw of request stream `seed` for output token `counter`: a double in [0, 1) with 53 random bits.
// Counter-based, so a request's draws depend on nothing but (seed, counter), and seeds s and s + 1 (the
// choices of n > 1) give unrelated streams.
M3_HOST_DEVICE double sample_uniform(uint64_t seed, uint64_t counter) {
  const uint64_t z = mix64(mix64(seed ^ 0x6a09e667f3bcc909ULL) + counter * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// One id's adjustment, in today's order: bias, repetition penalty (prompt or output ids), frequency and
// presence penalties (output ids), ban.
M3_HOST_DEVICE float adjust_logit(float logit, const LogitAdjustment& a, const Penalties& p) {
  using namespace sampling_detail;
  float l = fadd(logit, a.bias);
  if (p.repetition != 1.0f && (a.in_prompt || a.output_count > 0))
    l = l > 0.0f ? fdiv(l, p.repetition) : fmul(l, p.repetition);
  if (a.output_count > 0)
    l = fsub(l, fadd(fmul(p.frequency, static_cast<float>(a.output_count)), p.presence));
  if (a.banned) l = bits_float(0xff800000u);  // -inf
  return l;
}

// Order-preserving map of a logit to an unsigned key: larger logit, larger key. -0 and +0 share a key and a
// NaN sorts as -inf, so key order is exactly the float order the CPU rule uses.
M3_HOST_DEVICE uint32_t sort_key(float logit) {
  uint32_t b = sampling_detail::float_bits(logit);
  if (logit == 0.0f) b = 0;
  if (logit != logit) b = 0xff800000u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The logit of a key (the canonical one: +0 for zeros, -inf for NaNs).
M3_HOST_DEVICE float key_logit(uint32_t key) {
  return sampling_detail::bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// exp(x) for x <= 0 from IEEE adds and multiplies only (Cody-Waite reduction, degree-14 Taylor polynomial;
// within 2 ulp), so host and device agree bit for bit. Below -708 (and for NaN) it returns 0.
M3_HOST_DEVICE double exp_nonpositive(double x) {
  using namespace sampling_detail;
  if (!(x >= -708.0)) return 0.0;
  constexpr double kLog2e = 1.4426950408889634, kShifter = 0x1.8p52;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1, kLn2Lo = 0x1.a39ef35793c76p-33;
  const double k = dsub(dadd(dmul(x, kLog2e), kShifter), kShifter);  // nearest integer to x / ln 2
  const double r = dsub(dsub(x, dmul(k, kLn2Hi)), dmul(k, kLn2Lo));  // |r| <= ln 2 / 2
  // Horner on the Taylor coefficients 1/n!, n = 14 .. 0.
  double poly = 1.1470745597729725e-11;
  poly = dadd(dmul(poly, r), 1.6059043836821613e-10);
  poly = dadd(dmul(poly, r), 2.08767569878681e-09);
  poly = dadd(dmul(poly, r), 2.505210838544172e-08);
  poly = dadd(dmul(poly, r), 2.755731922398589e-07);
  poly = dadd(dmul(poly, r), 2.7557319223985893e-06);
  poly = dadd(dmul(poly, r), 2.48015873015873e-05);
  poly = dadd(dmul(poly, r), 0.0001984126984126984);
  poly = dadd(dmul(poly, r), 0.001388888888888889);
  poly = dadd(dmul(poly, r), 0.008333333333333333);
  poly = dadd(dmul(poly, r), 0.041666666666666664);
  poly = dadd(dmul(poly, r), 0.16666666666666666);
  poly = dadd(dmul(poly, r), 0.5);
  poly = dadd(dmul(poly, r), 1.0);
  poly = dadd(dmul(poly, r), 1.0);
  const int64_t e = static_cast<int64_t>(k) + 1023;  // k in [-1022, 0]: 2^k is a normal double
  return dmul(poly, bits_double(static_cast<uint64_t>(e) << 52));
}

// The unnormalised probability of a logit at temperature t > 0 given the row's maximum: exp((l - max) / t)
// in double; 0 for -inf.
M3_HOST_DEVICE double token_probability(float logit, float max_logit, float temperature) {
  using namespace sampling_detail;
  return exp_nonpositive(ddiv(dsub(static_cast<double>(logit), static_cast<double>(max_logit)),
                              static_cast<double>(temperature)));
}

}  // namespace m3
