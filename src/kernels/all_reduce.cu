// The one-shot all-reduce kernel: per block, copy in, signal the peers' slots, wait for theirs, sum in order.
#include "kernels/all_reduce.h"

namespace m3::cuda {
namespace {

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__global__ void one_shot_kernel(AllReducePeers peers, float* __restrict__ data, int64_t n,
                                uint32_t* __restrict__ counters) {
  const int b = blockIdx.x, R = peers.ranks;
  // This block's call number (only this block touches its counter): the epoch its signals carry, and the
  // staging half it uses.
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = counters[b] + 1;
  __syncthreads();
  const int64_t half = (epoch & 1) ? peers.capacity : 0;
  // 16-byte accesses when the message is whole float4s (every buffer here is cudaMalloc-aligned).
  const bool vec = (n & 3) == 0;
  const int64_t units = vec ? n / 4 : n;
  const int64_t chunk = (units + gridDim.x - 1) / gridDim.x, begin = b * chunk;
  const int64_t end = begin + chunk < units ? begin + chunk : units;
  float* mine = peers.staging[peers.rank] + half;
  if (vec) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      reinterpret_cast<float4*>(mine)[i] = reinterpret_cast<const float4*>(data)[i];
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = data[i];
  }
  __syncthreads();
  // Signal: slot [this rank][b] on every rank (release: the copy above is visible before the signal).
  if (threadIdx.x < R)
    store_release_sys(peers.signals[threadIdx.x] + peers.rank * kAllReduceBlocks + b, epoch);
  // Wait for every rank's signal for this block in this rank's slots.
  if (threadIdx.x < R) {
    const uint32_t* slot = peers.signals[peers.rank] + threadIdx.x * kAllReduceBlocks + b;
    while (load_acquire_sys(slot) != epoch) {
    }
  }
  __syncthreads();
  if (vec) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float4 s = reinterpret_cast<const float4*>(peers.staging[0] + half)[i];
      for (int r = 1; r < R; ++r) {
        const float4 v = reinterpret_cast<const float4*>(peers.staging[r] + half)[i];
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
      }
      reinterpret_cast<float4*>(data)[i] = s;
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float s = peers.staging[0][half + i];
      for (int r = 1; r < R; ++r) s += peers.staging[r][half + i];
      data[i] = s;
    }
  }
  if (threadIdx.x == 0) counters[b] = epoch;
}

}  // namespace

size_t all_reduce_staging_bytes(int64_t capacity) {
  return size_t(2) * capacity * sizeof(float);
}
size_t all_reduce_signal_bytes() {
  return size_t(kAllReduceMaxRanks) * kAllReduceBlocks * sizeof(uint32_t);
}
size_t all_reduce_counter_bytes() {
  return size_t(kAllReduceBlocks) * sizeof(uint32_t);
}

void one_shot_all_reduce(const AllReducePeers& peers, float* data, int64_t n, uint32_t* counters,
                         cudaStream_t stream) {
  if (n <= 0 || peers.ranks <= 1) return;
  one_shot_kernel<<<kAllReduceBlocks, 256, 0, stream>>>(peers, data, n, counters);
}

}  // namespace m3::cuda
