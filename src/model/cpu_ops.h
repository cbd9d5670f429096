// fp32 building blocks of the CPU reference backend. Every row of an output is computed independently of the
// other rows and of the batch size, in a fixed summation order, so results are bit-identical whatever the
// batching or prefill chunking (the invariance tests rely on this).
#pragma once

#include <cstdint>

namespace m3::cpu {

float dot(const float* a, const float* b, int n);

// y[T, N] = x[T, K] . W[N, K]^T  (W row-major [out, in], as stored in checkpoints)
void matmul(const float* x, int64_t T, int64_t K, const float* W, int64_t N, float* y);

// Gemma RMSNorm over rows of `dim`: y = x * rsqrt(mean(x^2) + eps) * (1 + w). In place is allowed (y == x).
void rms_norm_gemma(const float* x, float* y, int64_t rows, int dim, const float* w, float eps);

// SwiGLU-OAI (spec §3.6.1): min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1).
float swiglu_oai(float gate, float up, float alpha, float limit);
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);

}  // namespace m3::cpu
