// One-shot all-reduce over the GPUs of one machine through mapped peer memory (CUDA IPC over NVLink), for the
// small fp32 messages of decode steps, where NCCL's latency dominates (vLLM's and TensorRT-LLM's custom
// all-reduce). Each rank copies its input into its own staging buffer, signals every peer, waits for their
// signals, and sums every rank's staging buffer in rank order: every rank gets the same bits, in one kernel,
// capturable in a CUDA graph. Plain pointers here; dist/ maps the peers' buffers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace m3::cuda {

constexpr int kAllReduceMaxRanks = 8;
constexpr int kAllReduceBlocks = 64;  // CTAs per call (each owns a contiguous chunk of the message)

// Per rank, in device memory that every peer has mapped: two staging halves of `capacity` floats (calls
// alternate between them, so a fast rank's next call never overwrites what a slow peer still reads) and the
// signal slots [from rank][block].
struct AllReducePeers {
  float* staging[kAllReduceMaxRanks];     // rank r's staging buffer, as this rank addresses it
  uint32_t* signals[kAllReduceMaxRanks];  // rank r's signal slots, as this rank addresses them
  int ranks = 1, rank = 0;
  int64_t capacity = 0;  // floats per staging half (a multiple of 4: the halves stay 16-byte aligned)
};

size_t all_reduce_staging_bytes(int64_t capacity);  // both halves
size_t all_reduce_signal_bytes();
// This rank's per-block call counters (device memory, zeroed before the first call; one per block).
size_t all_reduce_counter_bytes();

// data[0, n) = sum over the ranks in rank order; n <= capacity. Every rank calls it with the same n.
void one_shot_all_reduce(const AllReducePeers& peers, float* data, int64_t n, uint32_t* counters,
                         cudaStream_t stream);

}  // namespace m3::cuda
