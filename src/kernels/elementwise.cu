// Row-wise and element-wise kernels: embedding, Gemma RMSNorm, the attention input's head preparation (norm,
// RoPE, page writes), row gathers. One block per row where a reduction is needed; grid-stride loops
// elsewhere.
#include <algorithm>
#include <string>

#include <cuda_fp8.h>

#include "common/error.h"
#include "common/random_init.h"
#include "kernels/kernels.h"
#include "kernels/paged.cuh"

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

// One CTA per row; 16-byte loads when the width allows.
__global__ void embed_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ ids, int H,
                             int vocab_begin, int vocab_end, float* __restrict__ out) {
  const int t = blockIdx.x;
  const int id = ids[t];
  float* o = out + static_cast<int64_t>(t) * H;
  if (id < vocab_begin || id >= vocab_end) {  // another rank's row: this rank adds zeros
    for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const bf16* row = table + static_cast<int64_t>(id - vocab_begin) * H;
  if (H % 8 == 0) {
    for (int i = threadIdx.x * 8; i < H; i += blockDim.x * 8) {
      const uint4 v = *reinterpret_cast<const uint4*>(row + i);
      const bf16* b = reinterpret_cast<const bf16*>(&v);
      *reinterpret_cast<float4*>(o + i) = make_float4(__bfloat162float(b[0]), __bfloat162float(b[1]),
                                                      __bfloat162float(b[2]), __bfloat162float(b[3]));
      *reinterpret_cast<float4*>(o + i + 4) = make_float4(__bfloat162float(b[4]), __bfloat162float(b[5]),
                                                          __bfloat162float(b[6]), __bfloat162float(b[7]));
    }
    return;
  }
  for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = __bfloat162float(row[i]);
}

constexpr int kNormVec = 8;  // float4s per thread kept in registers: rows up to 4 x 256 x 8 = 8192 wide

// With `delta`, first x += delta (the residual add), then the norm of the sum. Rows that are a multiple of 4
// wide (and at most 8192) stay in registers between the two passes, with 16-byte accesses.
__global__ void rms_norm_kernel(float* __restrict__ x, const float* __restrict__ delta,
                                const bf16* __restrict__ w, int dim, float eps, bf16* __restrict__ ob,
                                float* __restrict__ of) {
  const int64_t r = blockIdx.x;
  float* xr = x + r * dim;
  if (dim % 4 == 0 && dim <= 4 * kThreads * kNormVec) {
    float4 v[kNormVec];
    float ss = 0;
#pragma unroll
    for (int j = 0; j < kNormVec; ++j) {
      const int i = (j * kThreads + threadIdx.x) * 4;
      if (i >= dim) continue;
      v[j] = *reinterpret_cast<const float4*>(xr + i);
      if (delta) {
        const float4 d = *reinterpret_cast<const float4*>(delta + r * dim + i);
        v[j].x += d.x, v[j].y += d.y, v[j].z += d.z, v[j].w += d.w;
        *reinterpret_cast<float4*>(xr + i) = v[j];
      }
      ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
    const float inv = rsqrtf(block_sum(ss) / dim + eps);
#pragma unroll
    for (int j = 0; j < kNormVec; ++j) {
      const int i = (j * kThreads + threadIdx.x) * 4;
      if (i >= dim) continue;
      const uint2 wv = *reinterpret_cast<const uint2*>(w + i);
      const bf16* wb = reinterpret_cast<const bf16*>(&wv);
      const float4 y = make_float4(
          v[j].x * inv * (1.0f + __bfloat162float(wb[0])), v[j].y * inv * (1.0f + __bfloat162float(wb[1])),
          v[j].z * inv * (1.0f + __bfloat162float(wb[2])), v[j].w * inv * (1.0f + __bfloat162float(wb[3])));
      if (ob) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(y.x, y.y), hi = __floats2bfloat162_rn(y.z, y.w);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(ob + r * dim + i) = packed;
      }
      if (of) *reinterpret_cast<float4*>(of + r * dim + i) = y;
    }
    return;
  }
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = xr[i];
    if (delta) xr[i] = v += delta[r * dim + i];
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float y = xr[i] * inv * (1.0f + __bfloat162float(w[i]));
    if (ob) ob[r * dim + i] = __float2bfloat16(y);
    if (of) of[r * dim + i] = y;
  }
}

constexpr int kPrepWarps = kThreads / 32;

// One warp per (token, head) over the segments' heads in order. The head goes through a per-warp shared row:
// load (and norm), then RoPE on pairs that may sit in other lanes, then the fp32 and / or paged bf16 stores.
__global__ void prepare_heads_kernel(const float* __restrict__ proj, int64_t ld, HeadPrep prep,
                                     const float* __restrict__ inv_freq, TokenMeta m, int T, int rotary,
                                     float eps, int page_size, int heads_per_token) {
  __shared__ float rows[kPrepWarps][kMaxPrepDim];
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= T * heads_per_token) return;
  const int t = warp / heads_per_token;
  int head = warp % heads_per_token;
  HeadSegment sg = prep.seg[0];
#pragma unroll
  for (int g = 0; g < kMaxHeadSegments; ++g) {  // unrolled: no local copy of the parameter array
    if (head < prep.seg[g].heads) {
      sg = prep.seg[g];
      break;
    }
    head -= prep.seg[g].heads;
  }
  const int dim = sg.dim;
  const float* u = proj + t * ld + sg.col + static_cast<int64_t>(head) * dim;
  float* v = rows[threadIdx.x >> 5];
  const int p = m.pos[t];
  if (sg.norm) {
    float ss = 0;
    for (int i = lane; i < dim; i += 32) ss += u[i] * u[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    const float inv = rsqrtf(ss / dim + eps);
    for (int i = lane; i < dim; i += 32) v[i] = u[i] * inv * (1.0f + __bfloat162float(sg.norm[i]));
    __syncwarp();
    const int half = rotary / 2;
    for (int i = lane; i < half; i += 32) {
      const float a = static_cast<float>(p) * inv_freq[i];  // fp32 angle, as the reference computes it
      double sd, cd;
      sincos(static_cast<double>(a), &sd, &cd);
      const float c = static_cast<float>(cd), sn = static_cast<float>(sd);
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * c - x1 * sn;
      v[i + half] = x1 * c + x0 * sn;
    }
  } else {
    for (int i = lane; i < dim; i += 32) v[i] = u[i];
  }
  __syncwarp();
  if (sg.out) {
    float* o = sg.out + (static_cast<int64_t>(t) * sg.heads + head) * dim;
    for (int i = lane; i < dim; i += 32) o[i] = v[i];
  }
  if (sg.cache || sg.cache8) {
    const int64_t slot = static_cast<int64_t>(page_of(m, m.seq[t], p, page_size)) * page_size + p % page_size;
    const int64_t row = slot * sg.heads + head;
    if (sg.cache) {
      bf16* c = sg.cache + row * dim;
      for (int i = lane; i < dim; i += 32) c[i] = __float2bfloat16(v[i]);
    } else {  // FP8: the head's amax / 448 as its scale (1 if that is 0 or not finite), x / scale to e4m3
      float amax = 0.f;
      for (int i = lane; i < dim; i += 32) amax = fmaxf(amax, fabsf(v[i]));
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
      const float scale = amax > 0.f && isfinite(amax) ? __fdiv_rn(amax, 448.f) : 1.f;
      if (lane == 0) sg.cache_scale[row] = scale;
      auto* c = reinterpret_cast<__nv_fp8x2_storage_t*>(sg.cache8 + row * dim);
      for (int i = 2 * lane; i < dim; i += 64)
        c[i / 2] = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(v[i], scale), __fdiv_rn(v[i + 1], scale)),
                                            __NV_SATFINITE, __NV_E4M3);
    }
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    x[i] += y[i];
}

__global__ void gather_f32_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows, int width,
                                  float* __restrict__ dst) {
  const int i = blockIdx.x;
  const float* s = src + static_cast<int64_t>(rows[i]) * width;
  float* d = dst + static_cast<int64_t>(i) * width;
  if (width % 4 == 0) {
    for (int c = threadIdx.x * 4; c < width; c += blockDim.x * 4)
      *reinterpret_cast<float4*>(d + c) = *reinterpret_cast<const float4*>(s + c);
    return;
  }
  for (int c = threadIdx.x; c < width; c += blockDim.x) d[c] = s[c];
}

__global__ void fill_random_kernel(void* p, bool f32, int64_t n, uint64_t key, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    const float v = counter_gaussian(key + static_cast<uint64_t>(i)) * scale;
    if (f32)
      static_cast<float*>(p)[i] = v;
    else
      static_cast<bf16*>(p)[i] = __float2bfloat16(v);
  }
}

__global__ void fill_random_e4m3_kernel(uint8_t* p, int64_t n, uint64_t key, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    p[i] = __nv_cvt_float_to_fp8(counter_gaussian(key + static_cast<uint64_t>(i)) * scale, __NV_SATFINITE,
                                 __NV_E4M3);
}

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace

void embed_rows(const bf16* table, const int32_t* ids, int T, int H, int vocab_begin, int vocab_end,
                float* out, cudaStream_t s) {
  if (T > 0) embed_kernel<<<T, kThreads, 0, s>>>(table, ids, H, vocab_begin, vocab_end, out);
}
void rms_norm(const float* x, const bf16* w, int rows, int dim, float eps, bf16* ob, float* of,
              cudaStream_t s) {
  if (rows > 0)
    rms_norm_kernel<<<rows, kThreads, 0, s>>>(const_cast<float*>(x), nullptr, w, dim, eps, ob, of);
}
void add_rms_norm(float* x, const float* delta, const bf16* w, int rows, int dim, float eps, bf16* ob,
                  float* of, cudaStream_t s) {
  if (rows > 0) rms_norm_kernel<<<rows, kThreads, 0, s>>>(x, delta, w, dim, eps, ob, of);
}
void prepare_heads(const float* proj, int64_t ld, const HeadPrep& prep, const float* inv_freq, TokenMeta meta,
                   int T, int rotary_dim, float eps, int page_size, cudaStream_t s) {
  int heads = 0;
  for (const HeadSegment& sg : prep.seg) {
    if (sg.heads == 0) continue;
    if (sg.dim <= 0 || sg.dim > kMaxPrepDim || (sg.norm && rotary_dim > sg.dim) || (sg.cache8 && sg.dim % 2))
      fail(ErrorKind::kUnsupported, "prepare_heads: head dim " + std::to_string(sg.dim) + " (rotary " +
                                        std::to_string(rotary_dim) + ") outside 1.." +
                                        std::to_string(kMaxPrepDim));
    heads += sg.heads;
  }
  const int64_t warps = int64_t(T) * heads;
  if (warps > 0)
    prepare_heads_kernel<<<static_cast<unsigned>((warps + kPrepWarps - 1) / kPrepWarps), kThreads, 0, s>>>(
        proj, ld, prep, inv_freq, meta, T, rotary_dim, eps, page_size, heads);
}
__global__ void copy_pages_kernel(const PageCopyItem* items, int n) {
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const PageCopyItem it = items[i];
    const int4* src = static_cast<const int4*>(it.src);
    int4* dst = static_cast<int4*>(it.dst);
    const uint64_t n16 = it.bytes / 16;
    uint64_t j = threadIdx.x;
    for (; j + 3 * blockDim.x < n16; j += 4 * blockDim.x) {  // four 16-byte loads in flight per thread
      const int4 a = src[j], b = src[j + blockDim.x], c = src[j + 2 * blockDim.x],
                 d = src[j + 3 * blockDim.x];
      dst[j] = a, dst[j + blockDim.x] = b, dst[j + 2 * blockDim.x] = c, dst[j + 3 * blockDim.x] = d;
    }
    for (; j < n16; j += blockDim.x) dst[j] = src[j];
  }
}

void copy_pages(const PageCopyItem* items, int n, cudaStream_t s) {
  constexpr int kMaxBlocks = 32;
  if (n > 0) copy_pages_kernel<<<std::min(n, kMaxBlocks), kThreads, 0, s>>>(items, n);
}

void add_inplace(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n > 0) add_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
}
void fill_random(void* p, bool f32, int64_t n, uint64_t key, float scale, cudaStream_t s) {
  if (n > 0) fill_random_kernel<<<grid_for(n), kThreads, 0, s>>>(p, f32, n, key, scale);
}
void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t key, float scale, cudaStream_t s) {
  if (n > 0) fill_random_e4m3_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, key, scale);
}
void gather_rows_f32(const float* src, const int32_t* rows, int n, int width, float* dst, cudaStream_t s) {
  if (n > 0) gather_f32_kernel<<<n, kThreads, 0, s>>>(src, rows, width, dst);
}

}  // namespace m3::cuda
