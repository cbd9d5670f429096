// The vision tower's small kernels (see vision.h): one block per row for the reductions, a grid-stride loop
// for the elementwise ones.
#include "kernels/vision.h"

#include <cmath>

namespace m3::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < int(blockDim.x / 32); ++w) total += shared[w];
  return total;
}

__device__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) m = fmaxf(m, shared[w]);
  return m;
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, int dim, float eps,
                                  __nv_bfloat16* out, float* out_f32) {
  __shared__ float shared[32];
  const float* row = x + int64_t(blockIdx.x) * dim;
  float s = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) s += row[i];
  const float mean = block_sum(s, shared) / dim;
  float v = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) v += (row[i] - mean) * (row[i] - mean);
  const float rstd = rsqrtf(block_sum(v, shared) / dim + eps);
  __syncthreads();  // every thread has read the row before an in-place write
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float y = (row[i] - mean) * rstd * w[i] + b[i];
    out[int64_t(blockIdx.x) * dim + i] = __float2bfloat16(y);
    if (out_f32) out_f32[int64_t(blockIdx.x) * dim + i] = y;
  }
}

__global__ void bias_act_kernel(const float* y, const float* bias, int64_t n, int cols, bool gelu,
                                float* y_out, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = y[i] + bias[i % cols];
    if (y_out) y_out[i] = v;
    if (out) out[i] = __float2bfloat16(gelu ? 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) : v);
  }
}

__global__ void rope_kernel(const float* q, const float* k, int64_t ld, const float* cos, const float* sin,
                            int heads, int head_dim, int angles, __nv_bfloat16* q_out, __nv_bfloat16* k_out) {
  const int row = blockIdx.x;
  const float* c = cos + int64_t(row) * angles;
  const float* s = sin + int64_t(row) * angles;
  for (int i = threadIdx.x; i < heads * head_dim; i += blockDim.x) {
    const int d = i % head_dim;
    const int64_t at = int64_t(row) * ld + i, out = int64_t(row) * heads * head_dim + i;
    for (int which = 0; which < 2; ++which) {
      const float* x = which ? k : q;
      float v = x[at];
      if (d < angles)
        v = v * c[d] - x[at + angles] * s[d];
      else if (d < 2 * angles)
        v = v * c[d - angles] + x[at - angles] * s[d - angles];
      (which ? k_out : q_out)[out] = __float2bfloat16(v);
    }
  }
}

__global__ void softmax_kernel(const float* scores, int cols, __nv_bfloat16* p) {
  __shared__ float shared[32];
  const float* row = scores + int64_t(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, row[i]);
  m = block_max(m, shared);
  float s = 0;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) s += expf(row[i] - m);
  const float inv = 1.0f / block_sum(s, shared);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    p[int64_t(blockIdx.x) * cols + i] = __float2bfloat16(expf(row[i] - m) * inv);
}

__global__ void to_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(x[i]);
}

int grid_for(int64_t n) {
  return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
}

}  // namespace

void layer_norm_bias(const float* x, const float* w, const float* b, int rows, int dim, float eps,
                     __nv_bfloat16* out, float* out_f32, cudaStream_t s) {
  if (rows > 0) layer_norm_kernel<<<rows, kThreads, 0, s>>>(x, w, b, dim, eps, out, out_f32);
}
void bias_act(const float* y, const float* bias, int64_t rows, int cols, bool gelu, float* y_out,
              __nv_bfloat16* out_bf16, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n > 0) bias_act_kernel<<<grid_for(n), kThreads, 0, s>>>(y, bias, n, cols, gelu, y_out, out_bf16);
}
void vision_rope(const float* q, const float* k, int64_t ld, const float* cos, const float* sin, int n,
                 int heads, int head_dim, int angles, __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                 cudaStream_t s) {
  if (n > 0) rope_kernel<<<n, kThreads, 0, s>>>(q, k, ld, cos, sin, heads, head_dim, angles, q_out, k_out);
}
void softmax_rows(const float* scores, int64_t rows, int cols, __nv_bfloat16* p, cudaStream_t s) {
  if (rows > 0) softmax_kernel<<<unsigned(rows), kThreads, 0, s>>>(scores, cols, p);
}
void to_bf16(const float* x, int64_t n, __nv_bfloat16* out, cudaStream_t s) {
  if (n > 0) to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, out);
}

}  // namespace m3::cuda
