// Warpgroup tensor-core wrappers for sm_90a (wgmma): shared-memory matrix descriptors for the unswizzled
// ("interleaved") canonical layout, the fence / commit / wait protocol and m64nNk16 bf16 -> fp32 MMAs with A
// in registers (N = 64; wider products are several of them over column ranges of B). Generic: no knowledge of
// attention, MSA or MoE.
//
// Unswizzled layout: the operand is made of 8 x 8 "core matrices", each 8 rows of 16 contiguous bytes stored
// as 128 contiguous bytes. For a K-major operand a row is 8 consecutive K elements of one M/N index; for an
// N-major (transposed) B a row is 8 consecutive N elements of one K index. The descriptor gives the byte
// strides between core matrices: `lead` along K, `stride` along M/N (PTX ISA, "Matrix Descriptor Format").
// Register fragments (PTX ISA, "Register Fragments", wgmma .m64nNk16): warp w of the warpgroup owns rows
// 16w..16w+15; per warp, A is the mma.m16n8k16 A fragment and D the m16n8 C fragment of each 8-column tile
// (mma.cuh), so code written for mma.sync fragments reads and writes them unchanged.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/mma.cuh"

namespace m3::cuda {

// Descriptor of an unswizzled operand starting at `smem` (16-byte aligned).
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lead_bytes, uint32_t stride_bytes) {
  return uint64_t((smem_u32(smem) & 0x3FFFF) >> 4) | uint64_t((lead_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3FFF) << 32;
}

// Orders this thread's earlier register writes (accumulators, A fragments) before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins registers at this point of the program: accumulators (float), which the wgmma asm statements name as
// outputs, and A fragments (uint32_t), which the tensor cores may read until wgmma_wait returns. Without it
// the compiler may move reads or writes of them across wgmma_wait (the asm of the wait does not mention
// them). Call on every accumulator before the first wgmma of a batch and after wgmma_wait, and on A fragments
// after wgmma_wait.
template <typename T, int kRows>
__device__ __forceinline__ void wgmma_pin(T (&d)[kRows][4]) {
  static_assert(sizeof(T) == 4, "32-bit registers");
#pragma unroll
  for (int j = 0; j < kRows; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (std::is_same_v<T, float>)
        asm volatile("" : "+f"(d[j][e])::"memory");
      else
        asm volatile("" : "+r"(d[j][e])::"memory");
    }
}

// Makes this thread's shared-memory writes (plain stores, cp.async) visible to the async proxy (wgmma, bulk
// copies); follow with a barrier before the consumer reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d (64 x 64 fp32, fragment [8][4]) (+)= A (64 x 16 bf16, this warp's 16 rows in registers) . B
// (64 x 16 from shared memory, descriptor `b`); kTransB: B is stored N-major (else K-major).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                                   bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)), "n"(kTransB));
}

}  // namespace m3::cuda
