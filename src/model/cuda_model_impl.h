// Internals of the CUDA backend shared by its source files (cuda_model.cc: the step and its CUDA graphs;
// cuda_weights.cc: device memory, weight upload and the memory plan; cuda_ffn.cc: MLP and MoE). Not a public
// header: only src/model/cuda_*.cc include it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/device_communicator.h"
#include "kernels/kernels.h"
#include "model/cuda_model.h"
#include "model/weight_layout.h"

namespace m3 {

#define M3_CUDA_CHECK(expr)                                                                                \
  do {                                                                                                     \
    cudaError_t e_ = (expr);                                                                               \
    if (e_ != cudaSuccess) fail(ErrorKind::kInternal, std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define M3_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    cublasStatus_t s_ = (expr);                                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                            \
      fail(ErrorKind::kInternal, std::string(#expr) + ": cuBLAS status " + std::to_string(s_)); \
  } while (0)

// Batches up to this many tokens run the MoE through the grouped GEMV (no host sync, graph-safe); larger ones
// read the expert loads back once (one sync per MoE layer) and run a cuBLAS GEMM per non-empty expert.
constexpr int kGemvMaxTokens = 256;

// Batches up to this many tokens run FP8 linear layers through the GEMV (weights read once per 32 tokens);
// larger ones widen the weights to bf16 in a scratch buffer and run the bf16 GEMM.
constexpr int kFp8GemvMaxTokens = 32;

// A linear layer's weights [rows, K]: bf16, or MXFP8 (kernels/fp8.h: e4m3 bytes and one e8m0 scale per 32
// inputs), as the checkpoint or --quantization fp8 gives them.
struct Weight {
  cuda::bf16* w = nullptr;
  uint8_t *q = nullptr, *s = nullptr;
  bool fp8() const { return q != nullptr; }
  cuda::Fp8Matrix mx() const { return {q, s}; }
  // Rows [row0, ...) of this matrix of K columns (one expert of a layer's slab).
  Weight rows(size_t row0, int K) const {
    Weight r;
    if (w) r.w = w + row0 * size_t(K);
    if (q) r.q = q + row0 * size_t(K), r.s = s + row0 * size_t(K) / cuda::kFp8Block;
    return r;
  }
};

struct CudaModel::Impl {
  using bf16 = cuda::bf16;
  struct Layer {
    bf16 *in_norm = nullptr, *post_norm = nullptr;
    Weight w_in;  // fused input projections [n_in, H]: q | k | v | (MSA) index q | index k
    int n_in = 0;
    Weight o;
    bf16 *q_norm = nullptr, *k_norm = nullptr, *iq_norm = nullptr, *ik_norm = nullptr;
    Weight mlp_w13, mlp_w2;  // dense MLP: interleaved gate/up [2I, H], down [H, I]
    float *router = nullptr, *router_bias = nullptr;
    Weight exp_w13, exp_w2;  // [G, 2I, H], [G, H, I]: the experts held here, then the shared one if fused
    Weight sh_w13, sh_w2;    // the shared expert when its width differs
    bf16 *k_cache = nullptr, *v_cache = nullptr, *idx_cache = nullptr;  // k/v: bf16 pages
    uint8_t *k8 = nullptr, *v8 = nullptr;                               // or FP8 pages (opt.kv_fp8)
    float *k_scale = nullptr, *v_scale = nullptr;
    cuda::KvPages kv() const { return {k_cache, v_cache, k8, v8, k_scale, v_scale}; }
  };

  const ModelConfig& c;
  CudaModelOptions opt;
  // This rank's part of the model (all of it with one rank): heads, widths, vocabulary rows.
  ShardLayout shard;
  int hq = 0, hkv = 0;                             // query and KV (= MSA index query) heads held here
  int dense_i = 0, expert_i = 0, shared_i = 0;     // MLP widths held here
  int vocab_rows = 0;                              // LM-head rows allocated: ceil(vocab / tp) (zero-padded)
  std::shared_ptr<dist::DeviceCommunicator> nccl;  // the device collectives; null with one rank
  size_t weight_bytes = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;
  std::vector<void*> owned;     // weights
  std::vector<void*> kv_owned;  // KV pool
  bf16 *embed = nullptr, *lm_head = nullptr, *final_norm = nullptr;
  float* inv_freq = nullptr;
  unsigned* route_ticket = nullptr;             // moe_route_group's counter (0 between launches)
  unsigned long long* expert_tokens = nullptr;  // [num_experts]: tokens routed to each, over layers and steps
  std::vector<Layer> layers;
  bool shared_fused = false;  // shared expert stored as the last group of the expert slabs
  int max_n_in = 0;           // widest fused input projection over the layers
  std::map<std::string, std::pair<void*, size_t>> scratch;  // name -> (pointer, bytes)
  uint64_t scratch_generation = 0;  // bumped whenever a scratch buffer moves (captured graphs go stale)
  int min_score_stride = 0;         // profile run: size MSA score rows for the longest context

  explicit Impl(const ModelConfig& cfg) : c(cfg) {}
  ~Impl();

  template <typename T>
  T* own(size_t n) {
    void* p = nullptr;
    M3_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* buf(const std::string& name, size_t n) {
    auto& slot = scratch[name];
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    if (slot.second < bytes) {
      if (slot.first) M3_CUDA_CHECK(cudaFree(slot.first));
      M3_CUDA_CHECK(cudaMalloc(&slot.first, bytes));
      slot.second = bytes;
      ++scratch_generation;
    }
    return static_cast<T*>(slot.first);
  }
  template <typename T>
  T* to_device(const std::string& name, const std::vector<T>& v) {
    T* d = buf<T>(name, v.size());
    if (!v.empty())
      M3_CUDA_CHECK(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    return d;
  }
  size_t scratch_bytes() const {
    size_t n = 0;
    for (const auto& [name, b] : scratch) n += b.second;
    return n;
  }

  // Sums a partial result over the tensor-parallel ranks (no-op with one, and with data-parallel attention).
  void reduce(float* data, size_t n) {
    if (nccl && shard.tp_size > 1) nccl->all_reduce_sum(data, n, stream);
  }
  int kv_size() const { return hkv * c.head_dim; }

  // C[T, N] (fp32) = A[T, K] (bf16) . W[N, K]^T (bf16), fp32 accumulation.
  void gemm(const bf16* A, int T, int K, const bf16* W, int N, float* C);
  // The same for bf16 or FP8 weights: cuBLAS, or for FP8 the GEMV / widening + cuBLAS by batch size.
  void linear(const bf16* A, int T, int K, const Weight& W, int N, float* C);
  void gemm_f32(const float* A, int T, int K, const float* W, int N, float* C);

  // cuda_weights.cc
  void load_weights(const Checkpoint* ckpt, uint64_t random_seed);
  void check_weights_fit(const std::vector<WeightSpec>& specs, const std::vector<TensorCut>& cuts,
                         const std::function<bool(const WeightSpec&)>& is_fp8) const;
  Weight own_weight(size_t rows, int K, bool fp8);
  void* scratch_alloc_tmp(size_t bytes);
  void scratch_free_tmp();
  size_t kv_bytes_per_page() const;
  void allocate_kv(int pages);  // callers add one page: it takes the KV writes of CUDA-graph padding rows
  void free_kv();
  // Each page array of layer l (K and V, or their FP8 bytes and scales, and the index keys): its base and the
  // bytes one page takes in it.
  std::vector<std::pair<char*, size_t>> kv_arrays(int l) const;

  // cuda_host_tier.cc: the prefix cache's host tier, a pinned, mapped host copy of kv_arrays per slot. Copies
  // run on their own stream, one launch per layer; layer l of the next enqueue_step waits for its own.
  struct HostTier {
    int slots = 0;
    std::vector<std::vector<char*>> arrays;  // [layer][array], as kv_arrays
    std::vector<void*> owned;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr;
    std::vector<cudaEvent_t> layer_done;
    bool pending = false;  // layer_done holds copies the next step must wait for
  } host;
  void allocate_host_tier(int slots);
  void free_host_tier();
  void enqueue_page_copies(const std::vector<KvPageCopy>& copies, int num_pages);
  // Before layer l touches its KV pages: waits for that layer's copies, if any.
  void wait_page_copies(int l) {
    if (host.pending) M3_CUDA_CHECK(cudaStreamWaitEvent(stream, host.layer_done[size_t(l)], 0));
  }

  // cuda_ffn.cc: x bf16 [T, H] (x32: the same rows in fp32, for the router) -> out fp32 [T, H].
  void mlp(const bf16* x, int T, const Weight& w13, const Weight& w2, int inter, float* out, const char* tag);
  // Data-parallel attention: the step's tokens on each rank, which the MoE layers exchange (cuda_ffn.cc).
  std::vector<int> dp_tokens;
  void shared_expert(const Layer& L, const bf16* x, int T, float* out);
  // The MoE layer of a data-parallel attention rank: every rank's tokens gathered, the rank's experts run on
  // all of them, the sum over the ranks of its own rows kept, plus the shared expert on its own tokens.
  void moe_exchange(const Layer& L, const bf16* x, const float* x32, int T, float* out);
  // with_shared false: the routed experts only (moe_exchange adds the shared expert itself).
  void moe(const Layer& L, const bf16* x, const float* x32, int T, float* out, bool with_shared,
           std::vector<std::vector<int32_t>>* trace);
};

}  // namespace m3
