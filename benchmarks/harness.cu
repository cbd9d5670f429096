// The benchmark harness: timing with CUDA events and L2 flushes, device fills, the table and the JSON
// summary.
#include "harness.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include <cuda_bf16.h>

namespace m3::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::vector<std::pair<std::string, BenchFn>>& registry() {
  static std::vector<std::pair<std::string, BenchFn>> r;
  return r;
}
std::vector<Measurement>& results() {
  static std::vector<Measurement> r;
  return r;
}

__device__ inline float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, float scale, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_uniform(seed, i) * scale);
}
__global__ void fill_f32_kernel(float* p, size_t n, float scale, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = hash_uniform(seed, i) * scale;
}

// Touches a buffer larger than L2 (50 MB on H200) so the timed launch reads from HBM.
struct L2Flusher {
  void* buf = nullptr;
  size_t bytes = 256u << 20;
  void flush(cudaStream_t s) {
    if (!buf) check(cudaMalloc(&buf, bytes), "cudaMalloc(l2 flush)");
    check(cudaMemsetAsync(buf, 0, bytes, s), "memset(l2 flush)");
  }
} flusher;

}  // namespace

Registrar::Registrar(const char* name, BenchFn fn) {
  registry().emplace_back(name, fn);
}

bool wanted(const Options& o, const std::string& kernel, const std::string& shape) {
  if (o.filter.empty()) return true;
  const std::string name = kernel + " " + shape;
  size_t start = 0;
  for (;;) {  // comma-separated alternatives
    const size_t end = o.filter.find(',', start);
    const std::string part =
        o.filter.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

double time_us(const std::function<void(cudaStream_t)>& launch, cudaStream_t s, int iters, bool flush_l2) {
  // Own stream: capture needs a non-default stream.
  cudaStream_t st = s;
  if (st == nullptr) check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) launch(st);  // warm-up (lazy module loading, allocator growth)
  check(cudaStreamSynchronize(st), "warm-up");
  // Replay from a CUDA graph, as decode steps run, so host-side launch work is not timed; launches that
  // cannot be captured (host syncs) are timed eagerly.
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    launch(st);
    if (cudaStreamEndCapture(st, &graph) == cudaSuccess && graph != nullptr &&
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
      exec = nullptr;
    if (graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // a failed capture leaves an error behind
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    if (flush_l2) flusher.flush(st);
    check(cudaEventRecord(a, st), "record");
    if (exec)
      check(cudaGraphLaunch(exec, st), "graph launch");
    else
      launch(st);
    check(cudaEventRecord(b, st), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  check(cudaGetLastError(), "launch");
  if (exec) cudaGraphExecDestroy(exec);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (st != s) cudaStreamDestroy(st);
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

void report(const Measurement& m) {
  const Ceilings c;
  const double floor_us = std::max(m.bytes / c.hbm_bytes_per_s, m.flops / c.bf16_flops_per_s) * 1e6;
  std::printf("%-26s %-34s %10.1f us %8.0f GB/s %7.1f TF/s  floor %9.1f us  x%5.2f  %s\n", m.kernel.c_str(),
              m.shape.c_str(), m.us, m.bytes / m.us / 1e3, m.flops / m.us / 1e6, floor_us,
              floor_us > 0 ? m.us / floor_us : 0.0, m.note.c_str());
  std::fflush(stdout);
  results().push_back(m);
}

Arena::~Arena() {
  for (void* p : ptrs_) cudaFree(p);
}
void* Arena::alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc(bench)");
  ptrs_.push_back(p);
  return p;
}
void Arena::fill_bf16(void* p, size_t n, float scale, uint64_t seed) {
  fill_bf16_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, scale, seed);
  check(cudaDeviceSynchronize(), "fill");
}
void Arena::fill_f32(float* p, size_t n, float scale, uint64_t seed) {
  fill_f32_kernel<<<1024, 256>>>(p, n, scale, seed);
  check(cudaDeviceSynchronize(), "fill");
}

}  // namespace m3::bench

// m3-kernel-bench [--filter S[,S...]] [--iters N] [--quick] [--json FILE]
int main(int argc, char** argv) {
  using namespace m3::bench;
  Options o;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--filter")
      o.filter = value();
    else if (a == "--iters")
      o.iters = std::atoi(value().c_str());
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--json")
      json = value();
    else {
      std::fprintf(
          stderr,
          "usage: m3-kernel-bench [--filter SUBSTRING[,SUBSTRING...]] [--iters N] [--quick] [--json FILE]\n"
          "unknown argument: %s\n",
          a.c_str());
      return 2;
    }
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    std::fprintf(stderr, "error: no CUDA device\n");
    return 1;
  }
  const Ceilings c;
  std::printf("device: %s, %d SMs; ceilings: HBM %.1f TB/s, bf16 %.0f TFLOP/s\n", p.name,
              p.multiProcessorCount, c.hbm_bytes_per_s / 1e12, c.bf16_flops_per_s / 1e12);
  std::printf("%-26s %-34s %13s %13s %12s  %15s  %6s\n", "kernel", "shape", "time", "bandwidth", "compute",
              "floor", "ratio");
  int status = 0;
  for (auto& [name, fn] : registry()) {
    try {
      fn(o);
    } catch (const std::exception& e) {
      std::printf("%-26s ERROR %s\n", name.c_str(), e.what());
      status = 1;
    }
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "[\n");
    const auto& r = results();
    for (size_t i = 0; i < r.size(); ++i) {
      const double floor_us = std::max(r[i].bytes / c.hbm_bytes_per_s, r[i].flops / c.bf16_flops_per_s) * 1e6;
      std::fprintf(
          f,
          "  {\"kernel\": \"%s\", \"shape\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, \"flops\": %.0f, "
          "\"floor_us\": %.3f, \"note\": \"%s\"}%s\n",
          r[i].kernel.c_str(), r[i].shape.c_str(), r[i].us, r[i].bytes, r[i].flops, floor_us,
          r[i].note.c_str(), i + 1 < r.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return status;
}
