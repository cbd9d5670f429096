// The device communicator of ranks on one machine: small all-reduces (decode steps) through the one-shot
// kernel over CUDA IPC mappings of every rank's staging buffer (kernels/all_reduce.h), the rest through NCCL.
// Used when every rank is on this host and every pair of GPUs can address each other (NVLink / P2P).
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "dist/device_communicator.h"
#include "kernels/all_reduce.h"

namespace m3::dist {
namespace {

#define M3_DIST_CUDA(expr)                                                                                 \
  do {                                                                                                     \
    cudaError_t e_ = (expr);                                                                               \
    if (e_ != cudaSuccess) fail(ErrorKind::kInternal, std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

class OneShotAllReduce final : public DeviceCommunicator {
 public:
  OneShotAllReduce(std::unique_ptr<DeviceCommunicator> fallback, Communicator& host, int64_t max_floats)
      : fallback_(std::move(fallback)), max_floats_(max_floats) {
    peers_.ranks = host.size();
    peers_.rank = host.rank();
    peers_.capacity = max_floats;
    M3_DIST_CUDA(cudaMalloc(&staging_, cuda::all_reduce_staging_bytes(max_floats)));
    M3_DIST_CUDA(cudaMalloc(&signals_, cuda::all_reduce_signal_bytes()));
    M3_DIST_CUDA(cudaMalloc(&counters_, cuda::all_reduce_counter_bytes()));
    M3_DIST_CUDA(cudaMemset(signals_, 0, cuda::all_reduce_signal_bytes()));
    M3_DIST_CUDA(cudaMemset(counters_, 0, cuda::all_reduce_counter_bytes()));
    struct Handles {
      cudaIpcMemHandle_t staging, signals;
    } mine{};
    std::vector<Handles> all(peers_.ranks);
    M3_DIST_CUDA(cudaIpcGetMemHandle(&mine.staging, staging_));
    M3_DIST_CUDA(cudaIpcGetMemHandle(&mine.signals, signals_));
    host.all_gather(&mine, sizeof mine, all.data());
    for (int r = 0; r < peers_.ranks; ++r) {
      if (r == peers_.rank) {
        peers_.staging[r] = staging_;
        peers_.signals[r] = signals_;
        continue;
      }
      void* s = nullptr;
      void* g = nullptr;
      M3_DIST_CUDA(cudaIpcOpenMemHandle(&s, all[r].staging, cudaIpcMemLazyEnablePeerAccess));
      M3_DIST_CUDA(cudaIpcOpenMemHandle(&g, all[r].signals, cudaIpcMemLazyEnablePeerAccess));
      peers_.staging[r] = static_cast<float*>(s);
      peers_.signals[r] = static_cast<uint32_t*>(g);
      opened_.push_back(s);
      opened_.push_back(g);
    }
    if (host.rank() == 0)
      log_info("all-reduce: one-shot over NVLink up to ", max_floats * 4 / 1024, " KiB, NCCL above");
  }
  ~OneShotAllReduce() override {
    for (void* p : opened_) cudaIpcCloseMemHandle(p);
    cudaFree(staging_);
    cudaFree(signals_);
    cudaFree(counters_);
  }
  int rank() const override { return peers_.rank; }
  int size() const override { return peers_.ranks; }
  void all_reduce_sum(float* data, size_t n, CUstream_st* stream) override {
    if (int64_t(n) <= max_floats_)
      cuda::one_shot_all_reduce(peers_, data, int64_t(n), counters_, stream);
    else
      fallback_->all_reduce_sum(data, n, stream);
  }
  void all_gather(const void* send, size_t bytes, void* recv, CUstream_st* stream) override {
    fallback_->all_gather(send, bytes, recv, stream);
  }

 private:
  std::unique_ptr<DeviceCommunicator> fallback_;
  int64_t max_floats_;
  cuda::AllReducePeers peers_{};
  float* staging_ = nullptr;
  uint32_t* signals_ = nullptr;
  uint32_t* counters_ = nullptr;
  std::vector<void*> opened_;
};

}  // namespace

std::unique_ptr<DeviceCommunicator> with_one_shot_all_reduce(std::unique_ptr<DeviceCommunicator> nccl,
                                                             Communicator& host) {
  // Which GPU each rank drives, and whether every pair can address each other on this host.
  int device = 0;
  M3_DIST_CUDA(cudaGetDevice(&device));
  struct Where {
    char host[64];
    int32_t device, pid;
  } mine{};
  std::snprintf(mine.host, sizeof mine.host, "%s", host_name().c_str());
  mine.device = device;
  mine.pid = getpid();
  const int R = host.size();
  // Where the one-shot path stops (docs/performance.md): at 2 ranks (2 x H100, NVLink) it beats NCCL through
  // 3 MiB; with more ranks each GPU reads every peer's message, and at 4 (4 x H200) NCCL is as fast from 384
  // KiB (16 rows of 6,144 fp32) on: 256 KiB. M3_ONE_SHOT_ALL_REDUCE_KB overrides; 0 turns the path off.
  const char* env = std::getenv("M3_ONE_SHOT_ALL_REDUCE_KB");
  const int64_t kb = env && *env ? std::atoll(env) : host.size() <= 2 ? 3072 : 256;
  std::vector<Where> where(R);
  host.all_gather(&mine, sizeof mine, where.data());
  bool usable = R > 1 && R <= cuda::kAllReduceMaxRanks && kb > 0;
  for (int r = 0; r < R && usable; ++r) {
    // Same host, and another process (CUDA IPC maps only another process's memory; ranks that are threads of
    // one process, as in tests, stay on NCCL).
    usable = std::strncmp(where[r].host, mine.host, sizeof mine.host) == 0 &&
             (r == host.rank() || where[r].pid != mine.pid);
    int can = 1;
    if (usable && where[r].device != device) cudaDeviceCanAccessPeer(&can, device, where[r].device);
    usable = usable && can;
  }
  // Every rank must agree: the path is chosen per call by size alone.
  int32_t vote = usable ? 1 : 0;
  std::vector<int32_t> votes(R);
  host.all_gather(&vote, sizeof vote, votes.data());
  for (int32_t v : votes) usable = usable && v;
  if (!usable) return nccl;
  return std::make_unique<OneShotAllReduce>(std::move(nccl), host, kb * 1024 / 4);
}

}  // namespace m3::dist
