// Row-wise and element-wise kernels: embedding, Gemma RMSNorm, head norm + RoPE, page writes, SwiGLU-OAI,
// gathers and scatters. One block per row where a reduction is needed; grid-stride loops elsewhere.
#include "kernels/kernels.h"

namespace m3::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? part[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  __shared__ float total;
  if (threadIdx.x == 0) total = v;
  __syncthreads();
  float r = total;
  __syncthreads();
  return r;
}

__global__ void embed_kernel(const bf16* table, const int32_t* ids, int H, float* out) {
  const int t = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(ids[t]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[static_cast<int64_t>(t) * H + i] = __bfloat162float(row[i]);
}

__global__ void rms_norm_kernel(const float* x, const bf16* w, int dim, float eps, bf16* ob, float* of) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = rsqrtf(block_sum(ss) / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float y = xr[i] * inv * (1.0f + __bfloat162float(w[i]));
    if (ob) ob[r * dim + i] = __float2bfloat16(y);
    if (of) of[r * dim + i] = y;
  }
}

// One warp per (token, head).
__global__ void head_norm_rope_kernel(float* x, const bf16* w, const float* inv_freq, const int32_t* pos, int T,
                                      int heads, int dim, int rotary, float eps) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= T * heads) return;
  const int t = warp / heads;
  float* v = x + static_cast<int64_t>(warp) * dim;
  float ss = 0;
  for (int i = lane; i < dim; i += 32) ss += v[i] * v[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
  const float inv = rsqrtf(ss / dim + eps);
  for (int i = lane; i < dim; i += 32) v[i] = v[i] * inv * (1.0f + __bfloat162float(w[i]));
  __syncwarp();
  const int half = rotary / 2;
  const float p = static_cast<float>(pos[t]);
  for (int i = lane; i < half; i += 32) {
    const float a = p * inv_freq[i];  // fp32 angle, as the reference computes it
    double sd, cd;
    sincos(static_cast<double>(a), &sd, &cd);
    const float c = static_cast<float>(cd), s = static_cast<float>(sd);
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x1 * c + x0 * s;
  }
}

__global__ void write_pages_kernel(const float* src, bf16* cache, TokenMeta m, int T, int width, int page_size) {
  const int t = blockIdx.x;
  const int p = m.pos[t];
  const int page = m.block_table[static_cast<int64_t>(m.seq[t]) * m.max_blocks + p / page_size];
  bf16* dst = cache + (static_cast<int64_t>(page) * page_size + p % page_size) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = __float2bfloat16(src[static_cast<int64_t>(t) * width + i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] += y[i];
}

__global__ void scale_add_kernel(float* x, float scale, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = x[i] * scale + y[i];
}

__global__ void to_bf16_kernel(const float* x, bf16* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float alpha, float limit, bf16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = fminf(gate[i], limit);
    const float u = fmaxf(-limit, fminf(up[i], limit));
    out[i] = __float2bfloat16((u + 1.0f) * (g / (1.0f + expf(-alpha * g))));
  }
}

__global__ void gather_bf16_kernel(const bf16* src, const int32_t* rows, int width, bf16* dst) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    dst[static_cast<int64_t>(i) * width + c] = src[static_cast<int64_t>(rows[i]) * width + c];
}

__global__ void gather_f32_kernel(const float* src, const int32_t* rows, int width, float* dst) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    dst[static_cast<int64_t>(i) * width + c] = src[static_cast<int64_t>(rows[i]) * width + c];
}

__global__ void scatter_add_kernel(const float* y, const int32_t* rows, const float* w, int width, float* out) {
  const int i = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    out[static_cast<int64_t>(rows[i]) * width + c] += w[i] * y[static_cast<int64_t>(i) * width + c];
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

}  // namespace

void embed_rows(const bf16* table, const int32_t* ids, int T, int H, float* out, cudaStream_t s) {
  if (T > 0) embed_kernel<<<T, kThreads, 0, s>>>(table, ids, H, out);
}
void rms_norm(const float* x, const bf16* w, int rows, int dim, float eps, bf16* ob, float* of, cudaStream_t s) {
  if (rows > 0) rms_norm_kernel<<<rows, kThreads, 0, s>>>(x, w, dim, eps, ob, of);
}
void head_norm_rope(float* x, const bf16* w, const float* inv_freq, const int32_t* pos, int T, int heads, int dim,
                    int rotary, float eps, cudaStream_t s) {
  const int warps = T * heads;
  if (warps > 0) head_norm_rope_kernel<<<(warps * 32 + kThreads - 1) / kThreads, kThreads, 0, s>>>(x, w, inv_freq, pos, T, heads, dim, rotary, eps);
}
void write_pages(const float* src, bf16* cache, TokenMeta m, int T, int width, int page_size, cudaStream_t s) {
  if (T > 0) write_pages_kernel<<<T, 128, 0, s>>>(src, cache, m, T, width, page_size);
}
void add_inplace(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n > 0) add_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
}
void scale_add(float* x, float scale, const float* y, int64_t n, cudaStream_t s) {
  if (n > 0) scale_add_kernel<<<grid_for(n), kThreads, 0, s>>>(x, scale, y, n);
}
void f32_to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s) {
  if (n > 0) to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
}
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, bf16* out, cudaStream_t s) {
  if (n > 0) swiglu_kernel<<<grid_for(n), kThreads, 0, s>>>(gate, up, n, alpha, limit, out);
}
void gather_rows_bf16(const bf16* src, const int32_t* rows, int n, int width, bf16* dst, cudaStream_t s) {
  if (n > 0) gather_bf16_kernel<<<n, kThreads, 0, s>>>(src, rows, width, dst);
}
void gather_rows_f32(const float* src, const int32_t* rows, int n, int width, float* dst, cudaStream_t s) {
  if (n > 0) gather_f32_kernel<<<n, kThreads, 0, s>>>(src, rows, width, dst);
}
void scatter_add_rows(const float* y, const int32_t* rows, const float* w, int n, int width, float* out, cudaStream_t s) {
  if (n > 0) scatter_add_kernel<<<n, kThreads, 0, s>>>(y, rows, w, width, out);
}

}  // namespace m3::cuda
