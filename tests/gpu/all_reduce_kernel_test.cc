// The one-shot all-reduce kernel with its ranks on one GPU (each rank a stream, the peers' buffers plain
// allocations of the same device; across processes they are CUDA IPC mappings of the same memory): every rank
// gets the rank-order sum to the bit, call after call (the staging halves alternate), for message sizes that
// do and do not divide among the blocks, eagerly and replayed from CUDA graphs.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "gpu/device_buffer.h"
#include "gpu/gpu_util.h"
#include "kernels/all_reduce.h"

namespace m3 {
namespace {

struct Rank {
  std::unique_ptr<DeviceBuffer<float>> staging, data;
  std::unique_ptr<DeviceBuffer<uint32_t>> signals, counters;
  cudaStream_t stream = nullptr;
  cuda::AllReducePeers peers{};
};

class OneShotAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(OneShotAllReduce, EveryRankGetsTheRankOrderSum) {
  M3_REQUIRE_GPU();
  const int R = GetParam();
  const int64_t capacity = 70000;
  std::vector<Rank> ranks(R);
  for (Rank& k : ranks) {
    k.staging = std::make_unique<DeviceBuffer<float>>(2 * capacity);
    k.data = std::make_unique<DeviceBuffer<float>>(capacity);
    k.signals = std::make_unique<DeviceBuffer<uint32_t>>(cuda::all_reduce_signal_bytes() / 4);
    k.counters = std::make_unique<DeviceBuffer<uint32_t>>(cuda::all_reduce_counter_bytes() / 4);
    cudaMemset(k.signals->get(), 0, cuda::all_reduce_signal_bytes());
    cudaMemset(k.counters->get(), 0, cuda::all_reduce_counter_bytes());
    ASSERT_EQ(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking), cudaSuccess);
  }
  for (int r = 0; r < R; ++r) {
    cuda::AllReducePeers& p = ranks[r].peers;
    p.ranks = R;
    p.rank = r;
    p.capacity = capacity;
    for (int q = 0; q < R; ++q) {
      p.staging[q] = ranks[q].staging->get();
      p.signals[q] = ranks[q].signals->get();
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  std::vector<cudaGraphExec_t> graphs(R, nullptr);
  int64_t graph_n = 0;
  // Eager calls of several sizes, then the same call captured once per rank and replayed.
  const std::vector<int64_t> sizes = {1, 5, 16, 1000, 6144, 65536, 70000, 3, 6144, 6144, 6144};
  for (size_t call = 0; call < sizes.size(); ++call) {
    const int64_t n = sizes[call];
    const bool replay = call >= 8;
    std::vector<std::vector<float>> in(R, std::vector<float>(n));
    std::vector<float> expected(n, 0.0f);
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < n; ++i) in[r][i] = dist(rng);
    for (int64_t i = 0; i < n; ++i) {
      float s = in[0][i];
      for (int r = 1; r < R; ++r) s += in[r][i];
      expected[i] = s;
    }
    for (int r = 0; r < R; ++r) cudaMemcpy(ranks[r].data->get(), in[r].data(), n * 4, cudaMemcpyHostToDevice);
    if (replay && graphs[0] == nullptr) {
      graph_n = n;
      for (int r = 0; r < R; ++r) {
        cudaGraph_t g;
        ASSERT_EQ(cudaStreamBeginCapture(ranks[r].stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        cuda::one_shot_all_reduce(ranks[r].peers, ranks[r].data->get(), n, ranks[r].counters->get(),
                                  ranks[r].stream);
        ASSERT_EQ(cudaStreamEndCapture(ranks[r].stream, &g), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&graphs[r], g, 0), cudaSuccess);
        cudaGraphDestroy(g);
      }
    }
    for (int r = 0; r < R; ++r) {  // every rank's kernel in flight at once, each waiting for the others
      if (replay) {
        ASSERT_EQ(graph_n, n);
        cudaGraphLaunch(graphs[r], ranks[r].stream);
      } else {
        cuda::one_shot_all_reduce(ranks[r].peers, ranks[r].data->get(), n, ranks[r].counters->get(),
                                  ranks[r].stream);
      }
    }
    for (int r = 0; r < R; ++r) ASSERT_EQ(cudaStreamSynchronize(ranks[r].stream), cudaSuccess);
    for (int r = 0; r < R; ++r) {
      std::vector<float> out(n);
      cudaMemcpy(out.data(), ranks[r].data->get(), n * 4, cudaMemcpyDeviceToHost);
      ASSERT_EQ(out, expected) << "rank " << r << " call " << call << " n " << n;
    }
  }
  for (int r = 0; r < R; ++r) {
    if (graphs[r]) cudaGraphExecDestroy(graphs[r]);
    cudaStreamDestroy(ranks[r].stream);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, OneShotAllReduce, ::testing::Values(2, 4, 8));

}  // namespace
}  // namespace m3
