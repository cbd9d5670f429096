// GPU token sampling (cuda::sample_rows) at the real vocabulary (200,064) for rows = 1, 8, 32, 64: greedy,
// temperature 0.7 with top-p 0.95, the model's default generation config (temperature 1, top-k 40, top-p
// 0.95) and plain temperature 1, on LLM-like logits (a normal bulk, sigma 2, plus a few peaks). No adjustment
// entries, so the kernel leaves the logits as they are and every replay sees the same rows. Floor: the logits
// read once (rows x V x 4 bytes).
#include <random>
#include <string>
#include <vector>

#include "common/sampling_math.h"
#include "harness.h"
#include "kernels/sampling.h"

namespace m3::bench {
namespace {

M3_BENCH(sampling) {
  constexpr int V = 200064, kMaxRows = 64;
  struct Config {
    const char* name;
    float temperature, top_p;
    int top_k;
  };
  const Config configs[] = {{"greedy", 0.0f, 1.0f, 0},
                            {"T=0.7 p=0.95", 0.7f, 0.95f, 0},
                            {"T=1 k=40 p=0.95", 1.0f, 0.95f, 40},
                            {"T=1", 1.0f, 1.0f, 0}};
  const std::vector<int> row_counts = opts.quick ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 32, 64};
  auto shape = [](int rows, const Config& c) {
    return "rows=" + std::to_string(rows) + " V=200064 " + c.name;
  };
  bool any = false;
  for (const Config& c : configs)
    for (int rows : row_counts) any |= wanted(opts, "sampling", shape(rows, c));
  if (!any) return;

  std::mt19937 rng(7);
  std::normal_distribution<float> bulk(0.0f, 2.0f);
  std::uniform_real_distribution<float> peak(4.0f, 14.0f);
  std::vector<float> host(size_t(kMaxRows) * V);
  for (float& x : host) x = bulk(rng);
  for (int r = 0; r < kMaxRows; ++r)
    for (int i = 0; i < 1 + r % 4; ++i) host[size_t(r) * V + rng() % V] += peak(rng);
  Arena a;
  float* logits = a.get<float>(host.size());
  cudaMemcpy(logits, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  SamplingRow* params = a.get<SamplingRow>(kMaxRows);
  int32_t* out = a.get<int32_t>(kMaxRows);

  for (const Config& c : configs) {
    std::vector<SamplingRow> rows(kMaxRows);
    for (int r = 0; r < kMaxRows; ++r) {
      rows[r].temperature = c.temperature;
      rows[r].top_p = c.top_p;
      rows[r].top_k = c.top_k;
      rows[r].u = sample_uniform(11, r);
    }
    cudaMemcpy(params, rows.data(), rows.size() * sizeof(SamplingRow), cudaMemcpyHostToDevice);
    for (int n : row_counts) {
      if (!wanted(opts, "sampling", shape(n, c))) continue;
      Measurement m;
      m.kernel = "sampling";
      m.shape = shape(n, c);
      m.us = time_us([&](cudaStream_t s) { cuda::sample_rows(logits, n, V, params, nullptr, out, s); },
                     nullptr, opts.iters);
      m.bytes = double(n) * V * sizeof(float);
      m.note = "floor: the logits read once";
      report(m);
    }
  }
}

}  // namespace
}  // namespace m3::bench
