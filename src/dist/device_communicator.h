// Collectives on device memory between the GPUs of the ranks, enqueued on a CUDA stream so they run in step
// with the kernels around them and can be captured in CUDA graphs: the all-reduce after the row-parallel
// projections and the all-gather of vocabulary-parallel logits. The implementation is NCCL, loaded at run
// time (dlopen of libnccl.so.2: M3_NCCL_LIBRARY, else the library search path), so a one-GPU run and a
// CPU-only machine need no NCCL at all.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dist/communicator.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace m3::dist {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[i] = sum over ranks (fp32).
  virtual void all_reduce_sum(float* data, size_t n, CUstream_st* stream) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's send.
  virtual void all_gather(const void* send, size_t bytes, void* recv, CUstream_st* stream) = 0;
};

// NCCL over the ranks of `host` (which carries NCCL's unique id from rank 0), on the calling thread's current
// CUDA device. Collective: every rank calls it. Throws kUnsupported naming the library when NCCL cannot be
// loaded, kInternal with NCCL's message when it cannot connect.
std::unique_ptr<DeviceCommunicator> connect_nccl(Communicator& host);

// `nccl` plus, when every rank is on this host and every pair of GPUs can address each other, the one-shot
// all-reduce over CUDA IPC (kernels/all_reduce.h) for messages up to M3_ONE_SHOT_ALL_REDUCE_KB (default 3072
// at 2 ranks, 256 above; 0: off); NCCL for the rest and for all-gathers. Collective.
std::unique_ptr<DeviceCommunicator> with_one_shot_all_reduce(std::unique_ptr<DeviceCommunicator> nccl,
                                                             Communicator& host);

}  // namespace m3::dist
