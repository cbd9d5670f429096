// Whole steps of the CUDA backend on a full-width synthetic model (3 dense + 5 MSA/MoE layers, real widths,
// weights generated on the device; bf16 and, as *_fp8, FP8 linear weights, one model at a time): decode steps
// (CUDA graphs) at batch 1..64 with 8K tokens of context, and an 8K-token prefill. Times are host wall time
// of CudaModel::forward, as the engine sees it (metadata upload, the step, then either the logits read-back
// or, "sampled", GPU sampling and the ids read-back). Decode floor = bytes the step must read: every
// non-expert weight, the experts its tokens route to (counted from a traced step), K/V of the attended blocks
// and the index keys. Prefill: FLOPs of the linear and expert work (2 x active parameters per token) and of
// attention.
#include <chrono>
#include <set>

#include "harness.h"
#include "model/cuda_model.h"
#include "model/random_model.h"

namespace m3::bench {
namespace {

double wall_us(const std::function<void()>& fn, int iters) {
  fn();  // warm-up (captures the graph)
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Sizes {
  double non_expert = 0;        // bytes read by every step whatever the routing
  double expert = 0;            // one routed expert
  double params_per_token = 0;  // active parameters (no LM head)
};

// linear_bytes: bytes per parameter of the linear layers (2 bf16; 1 + 1/32 MXFP8); the LM head stays bf16 and
// the router fp32.
Sizes weight_sizes(const ModelConfig& c, double linear_bytes) {
  Sizes s;
  const double H = c.hidden_size, D = c.head_dim;
  double non_expert_params = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    double in = (c.num_heads + 2 * c.num_kv_heads) * D * H + c.num_heads * D * H;  // q k v o
    if (c.sparse_attention[l]) in += (c.msa.num_index_heads + 1) * c.msa.index_head_dim * H;
    in += 3.0 * (c.moe[l] ? c.shared_intermediate_size : c.dense_intermediate_size) * H;
    non_expert_params += in;
    s.non_expert += linear_bytes * in + (c.moe[l] ? 4.0 * c.num_experts * H : 0);  // fp32 router
  }
  s.non_expert += 2.0 * c.vocab_size * H;  // LM head
  s.expert = linear_bytes * 3.0 * c.expert_intermediate_size * H;
  int moe_layers = 0;
  for (bool m : c.moe) moe_layers += m;
  s.params_per_token =
      non_expert_params + moe_layers * c.experts_per_token * 3.0 * c.expert_intermediate_size * H;
  return s;
}

// One precision of the synthetic model: bf16 weights (81 GB) or FP8 (MXFP8, 41 GB; kernel names *_fp8).
void run_steps(const Options& opts, bool fp8) {
  const std::string decode_name = fp8 ? "decode_step_fp8" : "decode_step";
  const std::string prefill_name = fp8 ? "prefill_step_fp8" : "prefill_step";
  const int L = 8192;
  const std::vector<int> batches = opts.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 8, 32, 64};
  bool any = wanted(opts, prefill_name, "T=8192 one sequence") ||
             wanted(opts, prefill_name, "T=1024 one sequence") ||
             wanted(opts, prefill_name, "T=1024 after 32768 cached");
  for (int B : batches)
    any |= wanted(opts, decode_name, "B=" + std::to_string(B) + " L=" + std::to_string(L) + " sampled");
  if (!any) return;  // building the model takes a while
  ModelConfig c = random_model_config("m3", "3+5");
  const int P = c.msa.block_size;
  CudaModelOptions o;
  o.num_kv_pages = 64 * (L / P + 1) + 8;
  if (fp8) o.quantization = "fp8";
  CudaModel model(c, nullptr, o, /*random_seed=*/1);
  model.fill_kv_random(2);
  const Sizes w = weight_sizes(c, fp8 ? 1.0 + 1.0 / 32 : 2.0);
  for (int B : batches) {
    const std::string shape = "B=" + std::to_string(B) + " L=" + std::to_string(L);
    if (!wanted(opts, decode_name, shape)) continue;
    std::vector<std::vector<int32_t>> tables(B);
    ForwardBatch batch;
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i <= L / P; ++i) tables[b].push_back(b * (L / P + 1) + i);
      batch.token_ids.push_back(1000 + b);
      batch.seqs.push_back({b, 1, L, std::span<const int32_t>(tables[b]), true});
    }
    // Distinct experts this batch routes to, per MoE layer (from one traced step).
    ForwardOptions trace;
    trace.trace_moe = true;
    const ForwardOutput traced = model.forward(batch, trace);
    double experts = 0;
    for (const auto& layer : traced.moe_trace) {
      std::set<int32_t> seen;
      for (const auto& tok : layer) seen.insert(tok.begin(), tok.end());
      experts += double(seen.size());
    }
    double kv = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      const double keys = c.sparse_attention[l] ? std::min(L + 1, c.msa.topk_blocks * P) : L + 1;
      kv += keys * 2.0 * c.kv_size() * 2;  // K and V, bf16
      if (c.sparse_attention[l]) kv += (L + 1) * double(c.msa.index_head_dim) * 2;
    }
    Measurement m;
    m.kernel = decode_name;
    m.shape = shape;
    m.us = wall_us([&] { model.forward(batch); }, opts.iters);
    m.bytes = w.non_expert + experts * w.expert + B * kv;
    m.note = "graph; " + std::to_string(int(experts)) + " expert slabs over 5 MoE layers; logits read back";
    report(m);
    // As the server runs it: sampled on the GPU (top-p 0.95, temperature 0.7), B ids read back.
    for (int b = 0; b < B; ++b) {
      SamplingRow row;
      row.temperature = 0.7f;
      row.top_p = 0.95f;
      row.u = (b + 0.5) / B;
      batch.sampling.push_back(row);
    }
    m.shape = shape + " sampled";
    m.us = wall_us([&] { model.forward(batch); }, opts.iters);
    m.note = "graph + GPU sampling (top-p 0.95); " + std::to_string(int(experts)) + " expert slabs";
    report(m);
  }
  if (wanted(opts, prefill_name, "T=8192 one sequence")) {
    const int T = 8192;
    std::vector<int32_t> table;
    for (int i = 0; i < T / P; ++i) table.push_back(i);
    ForwardBatch batch;
    for (int t = 0; t < T; ++t) batch.token_ids.push_back(t % 50000);
    batch.seqs.push_back({0, T, 0, std::span<const int32_t>(table), true});
    const double active = w.params_per_token;
    double attn = 0;  // causal: sum over positions of attended keys x 4 x heads x dim
    for (int l = 0; l < c.num_layers; ++l)
      for (int p = 0; p < T; p += 64) {
        const double keys = c.sparse_attention[l] ? std::min(p + 1, c.msa.topk_blocks * P) : p + 1;
        attn += 64 * keys * 4.0 * c.num_heads * c.head_dim;
        if (c.sparse_attention[l]) attn += 64 * (p + 1) * 2.0 * c.msa.num_index_heads * c.msa.index_head_dim;
      }
    Measurement m;
    m.kernel = prefill_name;
    m.shape = "T=8192 one sequence";
    m.us = wall_us([&] { model.forward(batch); }, std::max(3, opts.iters / 4));
    m.flops = 2.0 * active * T + attn;
    const double linear_tflops = 2.0 * active * T / m.us / 1e6;
    m.note = "linear+expert " + std::to_string(int(linear_tflops)) + " TF/s of wall time (" +
             std::to_string(int(100 * linear_tflops / 790)) + "% of 790)";
    report(m);
  }

  // An agent's turn with prefix caching: 1,024 new tokens after a 32K-token cached conversation (the KV of
  // the cached pages is synthetic), against the same 1,024 tokens as a fresh prompt (issue #15's TTFT
  // target).
  for (int past : {0, 32768}) {
    const std::string shape = past ? "T=1024 after 32768 cached" : "T=1024 one sequence";
    if (!wanted(opts, prefill_name, shape)) continue;
    const int T = 1024;
    std::vector<int32_t> table;
    for (int i = 0; i < (past + T) / P; ++i) table.push_back(i);
    ForwardBatch batch;
    for (int t = 0; t < T; ++t) batch.token_ids.push_back((t * 7) % 50000);
    batch.seqs.push_back({0, T, past, std::span<const int32_t>(table), true});
    Measurement m;
    m.kernel = prefill_name;
    m.shape = shape;
    m.us = wall_us([&] { model.forward(batch); }, opts.iters);
    m.note = "one chunk, logits read back";
    report(m);
  }
}

M3_BENCH(step) {
  run_steps(opts, /*fp8=*/false);
  run_steps(opts, /*fp8=*/true);
}

}  // namespace
}  // namespace m3::bench
