// All-reduce of fp32 activations between the GPUs of this machine, at the sizes a tensor-parallel step sums:
// decode (T = 1 .. 64 rows of hidden 6144) and a prefill chunk (8,192 rows). Two paths, as the CUDA backend
// chooses between them by size: the one-shot kernel over peer memory (kernels/all_reduce.h; the peers'
// buffers mapped here with P2P, as CUDA IPC maps them across processes) and NCCL. Each rank is a thread
// driving its own GPU; the time is rank 0's median per call over back-to-back calls. Needs two or more GPUs
// and NCCL (M3_NCCL_LIBRARY); "bandwidth" below is algorithm bandwidth, bytes of one rank's message / time.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "dist/device_communicator.h"
#include "harness.h"
#include "kernels/all_reduce.h"
#include "support/thread_ranks.h"

namespace m3::bench {
namespace {

// Per-call time of `call` on rank 0 (microseconds): warm-up, then `iters` calls between two events.
double time_calls(const std::function<void()>& call, cudaStream_t s, int iters) {
  for (int i = 0; i < 5; ++i) call();
  cudaStreamSynchronize(s);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; ++i) call();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0 / iters;
}

M3_BENCH(all_reduce) {
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  if (gpus < 2) {
    std::printf("all_reduce: skipped (needs two GPUs, found %d)\n", gpus);
    return;
  }
  const int R = std::min(gpus, cuda::kAllReduceMaxRanks);
  constexpr int64_t H = 6144;
  const std::vector<int64_t> rows =
      opts.quick ? std::vector<int64_t>{1, 64} : std::vector<int64_t>{1, 8, 16, 32, 64, 128, 8192};
  const int64_t capacity = 128 * H;  // the one-shot path is timed up to 128 rows (3 MiB)
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < R; ++q)
      if (q != r) {
        cudaSetDevice(r);
        cudaDeviceEnablePeerAccess(q, 0);
      }
  // Each rank's staging buffer, signals and counters on its own GPU.
  std::vector<float*> staging(R), data(R);
  std::vector<uint32_t*> signals(R), counters(R);
  for (int r = 0; r < R; ++r) {
    cudaSetDevice(r);
    cudaMalloc(&staging[r], cuda::all_reduce_staging_bytes(capacity));
    cudaMalloc(&signals[r], cuda::all_reduce_signal_bytes());
    cudaMalloc(&counters[r], cuda::all_reduce_counter_bytes());
    cudaMemset(signals[r], 0, cuda::all_reduce_signal_bytes());
    cudaMemset(counters[r], 0, cuda::all_reduce_counter_bytes());
    cudaMalloc(&data[r], rows.back() * H * sizeof(float));
    cudaMemset(data[r], 0, rows.back() * H * sizeof(float));
  }
  std::vector<double> one_shot(rows.size(), 0), nccl(rows.size(), 0);
  testing::ThreadRanks ranks(R);
  ranks.run([&](std::shared_ptr<dist::Communicator> comm) {
    const int r = comm->rank();
    cudaSetDevice(r);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cuda::AllReducePeers peers{};
    peers.ranks = R;
    peers.rank = r;
    peers.capacity = capacity;
    for (int q = 0; q < R; ++q) {
      peers.staging[q] = staging[q];
      peers.signals[q] = signals[q];
    }
    auto device = dist::connect_nccl(*comm);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t n = rows[i] * H;
      const int iters = rows[i] >= 8192 ? 20 : 200;
      if (n <= capacity) {
        comm->all_reduce_sum(nullptr, 0);  // line the ranks up before each series
        const double us =
            time_calls([&] { cuda::one_shot_all_reduce(peers, data[r], n, counters[r], s); }, s, iters);
        if (r == 0) one_shot[i] = us;
      }
      comm->all_reduce_sum(nullptr, 0);
      const double us = time_calls([&] { device->all_reduce_sum(data[r], size_t(n), s); }, s, iters);
      if (r == 0) nccl[i] = us;
    }
    cudaStreamDestroy(s);
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    const double bytes = double(rows[i]) * H * 4;
    for (int path = 0; path < 2; ++path) {
      const double us = path == 0 ? one_shot[i] : nccl[i];
      if (us <= 0) continue;
      Measurement m;
      m.kernel = "all_reduce";
      m.shape = "ranks=" + std::to_string(R) + " rows=" + std::to_string(rows[i]) + " x 6144 fp32 " +
                (path == 0 ? "one-shot" : "nccl");
      if (!wanted(opts, m.kernel, m.shape)) continue;
      m.us = us;
      char note[96];
      std::snprintf(note, sizeof note, "%.1f GB/s algorithm bandwidth (%.0f KiB per rank)", bytes / us / 1e3,
                    bytes / 1024);
      m.note = note;
      report(m);
    }
  }
  for (int r = 0; r < R; ++r) {
    cudaSetDevice(r);
    cudaFree(staging[r]);
    cudaFree(signals[r]);
    cudaFree(counters[r]);
    cudaFree(data[r]);
  }
  cudaSetDevice(0);
}

}  // namespace
}  // namespace m3::bench
