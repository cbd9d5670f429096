// Warp-level tensor-core and memory wrappers for sm_80+ (used on sm_90a): mma.sync m16n8k16 bf16 -> fp32,
// 16-byte global loads, ldmatrix (x2/x4, optionally transposed), cp.async 16-byte copies with zero fill,
// bf16x2 packing and a fast exp2; sm_90 only: mbarriers, bulk (TMA, non-tensor) global -> shared copies and
// programmatic-dependent-launch controls. Generic: no knowledge of attention, MSA or MoE. Fragment layouts
// are those of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"); with g = lane / 4
// and c = lane % 4:
//   A (16x16, row major): a[0] = A[g][2c..2c+1],  a[1] = A[g+8][2c..2c+1],
//                         a[2] = A[g][2c+8..2c+9], a[3] = A[g+8][2c+8..2c+9]
//   B (16x8, "col"):      b0 = B[2c..2c+1][g],     b1 = B[2c+8..2c+9][g]
//   C/D (16x8, fp32):     d[0..1] = D[g][2c..2c+1], d[2..3] = D[g+8][2c..2c+1]
// Each 32-bit register holds two bf16, the lower column (or row, for B) in the low half.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace m3::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// acc += A . B for one 16x8x16 tile (bf16 inputs, fp32 accumulators); b = {b0, b1} of the layout above.
__device__ __forceinline__ void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16-byte global loads (16-byte aligned): ld_16 a plain load; ld_stream_16 for data read once by the kernel
// (weights): read-only path, no L1 allocation.
__device__ __forceinline__ uint4 ld_16(const void* p) {
  return *static_cast<const uint4*>(p);
}
__device__ __forceinline__ uint4 ld_stream_16(const void* p) {
  uint4 v;
  // volatile: a non-volatile asm counts as side-effect free, so the compiler may hoist it out of the bounds
  // check guarding it (seen: an out-of-bounds prefetch under compute-sanitizer).
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// ldmatrix: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each, 16-byte aligned) of matrix i;
// register i receives matrix i's fragment: lane l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (with
// .trans: the transposed matrix, i.e. rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4). x2 reads addresses
// from lanes 0..15.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(row)));
}

// 16-byte global -> shared copy that bypasses L1 (both addresses 16-byte aligned).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem) : "memory");
}
// As cp_async_16 when `valid`; otherwise writes 16 zero bytes and reads nothing (gmem must still be a mapped
// address: pass the buffer's base).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32): a subset of the CTA's
// warps synchronises without the others.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// 4-byte version (through L1; both addresses 4-byte aligned): per-row scales.
__device__ __forceinline__ void cp_async_4_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- sm_90: mbarriers and bulk async copies. An mbarrier phase completes when its pending arrivals reach 0
// and every byte announced with arrive_expect_tx has landed; waiters name the phase by its parity.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
}
// Makes initialised mbarriers visible to the async proxy (bulk copies); follow with __syncthreads().
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// One arrival that also announces `bytes` of bulk copies completing on this barrier in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
// Blocks until the phase of parity `parity` has completed (acquire: its copies and prior writes are visible).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this CTA's shared
// memory; completes `bytes` transactions on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// ---- sm_90: programmatic dependent launch. A kernel launched with programmatic stream serialization may
// start before the previous kernel of its stream has finished: everything it reads that the previous kernel
// may write must come after griddep_wait(), which returns once that kernel has completed and its writes are
// visible (at once without such a launch). griddep_launch_dependents() lets the next such kernel start
// launching before this one ends (it still waits for this kernel's completion in its own griddep_wait()).
__device__ __forceinline__ void griddep_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Two floats -> one register of two bf16 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x with the hardware approximation (ex2.approx, relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace m3::cuda
