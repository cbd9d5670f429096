// Straightforward loops; OpenMP spreads rows over cores. The dot product keeps 8 partial sums so the compiler
// can vectorise it without -ffast-math, in an order that depends only on n.
#include "model/cpu_ops.h"

#include <cmath>

namespace m3::cpu {

float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void matmul(const float* x, int64_t T, int64_t K, const float* W, int64_t N, float* y) {
#pragma omp parallel for collapse(2) schedule(static) if (T * N * K > 32768)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) y[t * N + n] = dot(x + t * K, W + n * K, static_cast<int>(K));
}

void rms_norm_gemma(const float* x, float* y, int64_t rows, int dim, const float* w, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = dot(xr, xr, dim);
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * (1.0f + w[i]);
  }
}

float swiglu_oai(float g, float u, float alpha, float limit) {
  g = std::fmin(g, limit);
  u = std::fmax(-limit, std::fmin(u, limit));
  float glu = g / (1.0f + std::exp(-alpha * g));
  return (u + 1.0f) * glu;
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) out[i] = swiglu_oai(gate[i], up[i], alpha, limit);
}

}  // namespace m3::cpu
