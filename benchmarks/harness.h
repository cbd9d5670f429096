// The kernel benchmark harness (`m3-kernel-bench`): each bench registers a function that times launches with
// CUDA events (L2 flushed before every timed launch unless it asks otherwise) and reports time, achieved
// bandwidth and FLOP rate against the H200 ceilings measured on the lent machine (HBM read 4.5 TB/s, bf16
// GEMM 790 TFLOP/s; see shared/spec/performance.md §6): floor = max(bytes / HBM, flops / tensor peak).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

namespace m3::bench {

struct Ceilings {
  double hbm_bytes_per_s = 4.5e12;
  double bf16_flops_per_s = 790e12;
};

struct Measurement {
  std::string kernel;  // e.g. "msa_decode"
  std::string shape;   // e.g. "B=32 L=131072"
  double us = 0;       // median time per launch
  double bytes = 0;    // bytes that must move from HBM (the byte floor's numerator)
  double flops = 0;    // useful FLOPs
  std::string note;    // optional: what the floor counts, a comparison, ...
};

struct Options {
  std::string filter;  // comma-separated substrings of "kernel shape"; empty = all
  int iters = 20;
  bool quick = false;  // fewer shapes (smoke run)
};

// Times `launch` (which enqueues work on the stream it is given): warm-up, then `iters` timed replays of it
// captured in a CUDA graph (eager launches if it cannot be captured), each after an L2 flush when flush_l2;
// returns the median in microseconds. s == nullptr: a private stream.
double time_us(const std::function<void(cudaStream_t)>& launch, cudaStream_t s, int iters,
               bool flush_l2 = true);

// Prints one table row (and keeps it for the JSON summary).
void report(const Measurement& m);

// Device buffers that live until the bench function returns.
class Arena {
 public:
  ~Arena();
  void* alloc(size_t bytes);
  template <typename T>
  T* get(size_t n) {
    return static_cast<T*>(alloc(n * sizeof(T)));
  }
  // Fills bf16 / fp32 buffers with uniform values in [-scale, scale) on the device.
  void fill_bf16(void* p, size_t n, float scale, uint64_t seed);
  void fill_f32(float* p, size_t n, float scale, uint64_t seed);

 private:
  std::vector<void*> ptrs_;
};

using BenchFn = void (*)(const Options&);
struct Registrar {
  Registrar(const char* name, BenchFn fn);
};

#define M3_BENCH(name)                                                       \
  static void m3_bench_##name(const ::m3::bench::Options&);                  \
  static ::m3::bench::Registrar m3_bench_reg_##name(#name, m3_bench_##name); \
  static void m3_bench_##name(const ::m3::bench::Options& opts)

bool wanted(const Options& o, const std::string& kernel, const std::string& shape);

}  // namespace m3::bench
