// Device helpers shared by the kernels that read paged caches: page lookup through the block table and warp
// reductions.
#pragma once

#include "kernels/kernels.h"

namespace m3::cuda {

__device__ __forceinline__ int page_of(const TokenMeta& m, int seq, int pos, int page_size) {
  return m.block_table[static_cast<int64_t>(seq) * m.max_blocks + pos / page_size];
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

}  // namespace m3::cuda
