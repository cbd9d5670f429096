// Device helper for kernels that read paged caches: page lookup through the block table.
#pragma once

#include "kernels/kernels.h"

namespace m3::cuda {

__device__ __forceinline__ int page_of(const TokenMeta& m, int seq, int pos, int page_size) {
  return m.block_table[static_cast<int64_t>(seq) * m.max_blocks + pos / page_size];
}

}  // namespace m3::cuda
