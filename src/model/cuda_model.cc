// Host side of the CUDA backend: device memory, weight upload, batch metadata and the per-layer launch
// sequence. Scratch buffers grow to the largest batch seen and are reused.
#include "model/cuda_model.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "loader/dtype.h"
#include "model/rope.h"
#include "model/weight_layout.h"

namespace m3 {
namespace {

using cuda::bf16;

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

template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  M3_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

}  // namespace

struct CudaModel::Impl {
  struct Layer {
    bf16 *in_norm = nullptr, *post_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    bf16 *q_norm = nullptr, *k_norm = nullptr, *iq = nullptr, *ik = nullptr, *iq_norm = nullptr,
         *ik_norm = nullptr;
    bf16 *mlp_gate = nullptr, *mlp_up = nullptr, *mlp_down = nullptr;
    float *router = nullptr, *router_bias = nullptr;
    std::vector<bf16*> eg, eu, ed;
    bf16 *sg = nullptr, *su = nullptr, *sd = nullptr;
    bf16 *k_cache = nullptr, *v_cache = nullptr, *idx_cache = nullptr;
  };

  const ModelConfig& c;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> owned;
  bf16 *embed = nullptr, *lm_head = nullptr, *final_norm = nullptr;
  float* inv_freq = nullptr;
  std::vector<Layer> layers;
  std::map<std::string, std::pair<void*, size_t>> scratch;  // name -> (pointer, bytes)

  explicit Impl(const ModelConfig& cfg) : c(cfg) {}
  ~Impl() {
    for (void* p : owned) cudaFree(p);
    for (auto& [n, b] : scratch) cudaFree(b.first);
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }

  template <typename T>
  T* own(size_t n) {
    T* p = device_alloc<T>(n);
    owned.push_back(p);
    return p;
  }
  template <typename T>
  T* buf(const std::string& name, size_t n) {
    auto& slot = scratch[name];
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    if (slot.second < bytes) {
      if (slot.first) M3_CUDA_CHECK(cudaFree(slot.first));
      M3_CUDA_CHECK(cudaMalloc(&slot.first, bytes));
      slot.second = bytes;
    }
    return static_cast<T*>(slot.first);
  }
  float* upload_f32(const std::vector<float>& v) {
    float* d = own<float>(v.size());
    M3_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return d;
  }
  template <typename T>
  T* to_device(const std::string& name, const std::vector<T>& v) {
    T* d = buf<T>(name, v.size());
    if (!v.empty())
      M3_CUDA_CHECK(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    return d;
  }

  // C[T, N] (fp32) = A[T, K] (bf16) . W[N, K]^T (bf16), fp32 accumulation.
  void gemm(const bf16* A, int T, int K, const bf16* W, int N, float* C) {
    if (T == 0) return;
    const float one = 1.0f, zero = 0.0f;
    M3_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, CUDA_R_16BF, K, A,
                                 CUDA_R_16BF, K, &zero, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }
  void gemm_f32(const float* A, int T, int K, const float* W, int N, float* C) {
    if (T == 0) return;
    const float one = 1.0f, zero = 0.0f;
    M3_CUBLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, K, A, K, &zero, C, N));
  }
  // down(act(gate(x), up(x))) for x bf16 [T, H] -> out fp32 [T, H]
  void mlp(const bf16* x, int T, const bf16* g, const bf16* u, const bf16* d, int inter, float* out,
           const char* tag) {
    const int H = c.hidden_size;
    float* gate = buf<float>(std::string(tag) + ".g", size_t(T) * inter);
    float* up = buf<float>(std::string(tag) + ".u", size_t(T) * inter);
    bf16* act = buf<bf16>(std::string(tag) + ".a", size_t(T) * inter);
    gemm(x, T, H, g, inter, gate);
    gemm(x, T, H, u, inter, up);
    cuda::swiglu_oai(gate, up, int64_t(T) * inter, c.swiglu_alpha, c.swiglu_limit, act, stream);
    gemm(act, T, inter, d, H, out);
  }
  void moe(const Layer& L, const bf16* x, const float* x32, int T, float* out,
           std::vector<std::vector<int32_t>>* trace);
};

void CudaModel::Impl::moe(const Layer& L, const bf16* x, const float* x32, int T, float* out,
                          std::vector<std::vector<int32_t>>* trace) {
  const int H = c.hidden_size, E = c.num_experts, K = c.experts_per_token, I = c.expert_intermediate_size;
  float* logits = buf<float>("router", size_t(T) * E);
  gemm_f32(x32, T, H, L.router, E, logits);
  int32_t* ids = buf<int32_t>("route.ids", size_t(T) * K);
  float* w = buf<float>("route.w", size_t(T) * K);
  cuda::moe_route(logits, L.router_bias, T, E, K, ids, w, stream);
  std::vector<int32_t> hid(size_t(T) * K);
  std::vector<float> hw(size_t(T) * K);
  M3_CUDA_CHECK(cudaMemcpyAsync(hid.data(), ids, hid.size() * 4, cudaMemcpyDeviceToHost, stream));
  M3_CUDA_CHECK(cudaMemcpyAsync(hw.data(), w, hw.size() * 4, cudaMemcpyDeviceToHost, stream));
  M3_CUDA_CHECK(cudaStreamSynchronize(stream));  // grouping by expert happens on the host (see header)
  std::vector<std::vector<std::pair<int32_t, float>>> per(E);
  for (int t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) per[hid[size_t(t) * K + k]].push_back({t, hw[size_t(t) * K + k]});
    if (trace) {
      (*trace)[t].assign(hid.begin() + size_t(t) * K, hid.begin() + size_t(t + 1) * K);
      std::sort((*trace)[t].begin(), (*trace)[t].end());
    }
  }
  std::vector<int32_t> rows;
  std::vector<float> weights;
  std::vector<int> offset(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    offset[e] = static_cast<int>(rows.size());
    for (auto [t, wt] : per[e]) {
      rows.push_back(t);
      weights.push_back(wt);
    }
  }
  offset[E] = static_cast<int>(rows.size());
  const int n = offset[E];
  int32_t* drows = to_device("moe.rows", rows);
  float* dw = to_device("moe.w", weights);
  bf16* xs = buf<bf16>("moe.x", size_t(n) * H);
  float* ys = buf<float>("moe.y", size_t(n) * H);
  cuda::gather_rows_bf16(x, drows, n, H, xs, stream);
  M3_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(T) * H * 4, stream));
  for (int e = 0; e < E; ++e) {  // ascending expert order, as the reference accumulates
    const int ne = offset[e + 1] - offset[e];
    if (ne == 0) continue;
    mlp(xs + size_t(offset[e]) * H, ne, L.eg[e], L.eu[e], L.ed[e], I, ys + size_t(offset[e]) * H, "expert");
    cuda::scatter_add_rows(ys + size_t(offset[e]) * H, drows + offset[e], dw + offset[e], ne, H, out, stream);
  }
  float* shared = buf<float>("moe.shared", size_t(T) * H);
  mlp(x, T, L.sg, L.su, L.sd, c.shared_intermediate_size, shared, "shared");
  cuda::scale_add(out, c.routed_scaling_factor, shared, int64_t(T) * H, stream);
}

CudaModel::CudaModel(ModelConfig config, const Checkpoint& ckpt, int num_kv_pages,
                     double gpu_memory_utilization)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(config_)) {
  const ModelConfig& c = config_;
  if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    fail(ErrorKind::kUnsupported,
         "the CUDA backend supports head_dim 32, 64, 128 or 256 (got " + std::to_string(c.head_dim) + ")");
  if (c.msa.topk_blocks > 64)
    fail(ErrorKind::kUnsupported, "the CUDA backend supports at most 64 MSA top-k blocks");
  Impl& m = *impl_;
  M3_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  M3_CUBLAS_CHECK(cublasCreate(&m.blas));
  M3_CUBLAS_CHECK(cublasSetStream(m.blas, m.stream));
  M3_CUBLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<WeightSpec> specs = weight_layout(c);
  const std::vector<std::string> names = resolve_weight_names(ckpt, specs);
  m.layers.resize(c.num_layers);
  for (auto& L : m.layers) L.eg.resize(c.num_experts), L.eu.resize(c.num_experts), L.ed.resize(c.num_experts);
  // Pass 1: device memory for every tensor, wired into the layer structs (single-threaded, cheap).
  std::vector<void*> dst(specs.size());
  std::vector<bool> fp32(specs.size());
  std::vector<uint64_t> size(specs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    size_t numel = 1;
    for (int64_t d : s.shape) numel *= size_t(d);
    Impl::Layer* L = s.layer >= 0 ? &m.layers[s.layer] : nullptr;
    fp32[i] = s.role == WeightRole::kRouter || s.role == WeightRole::kRouterBias;
    size[i] = numel * (fp32[i] ? 4 : 2);
    total += size[i];
    if (fp32[i]) {
      dst[i] = (s.role == WeightRole::kRouter ? L->router : L->router_bias) = m.own<float>(numel);
      continue;
    }
    bf16* d = m.own<bf16>(numel);
    dst[i] = d;
    switch (s.role) {
      case WeightRole::kEmbed:
        m.embed = d;
        break;
      case WeightRole::kLmHead:
        m.lm_head = d;
        break;
      case WeightRole::kFinalNorm:
        m.final_norm = d;
        break;
      case WeightRole::kInputNorm:
        L->in_norm = d;
        break;
      case WeightRole::kPostNorm:
        L->post_norm = d;
        break;
      case WeightRole::kQ:
        L->q = d;
        break;
      case WeightRole::kK:
        L->k = d;
        break;
      case WeightRole::kV:
        L->v = d;
        break;
      case WeightRole::kO:
        L->o = d;
        break;
      case WeightRole::kQNorm:
        L->q_norm = d;
        break;
      case WeightRole::kKNorm:
        L->k_norm = d;
        break;
      case WeightRole::kIndexQ:
        L->iq = d;
        break;
      case WeightRole::kIndexK:
        L->ik = d;
        break;
      case WeightRole::kIndexQNorm:
        L->iq_norm = d;
        break;
      case WeightRole::kIndexKNorm:
        L->ik_norm = d;
        break;
      case WeightRole::kMlpGate:
        L->mlp_gate = d;
        break;
      case WeightRole::kMlpUp:
        L->mlp_up = d;
        break;
      case WeightRole::kMlpDown:
        L->mlp_down = d;
        break;
      case WeightRole::kExpertGate:
        L->eg[s.expert] = d;
        break;
      case WeightRole::kExpertUp:
        L->eu[s.expert] = d;
        break;
      case WeightRole::kExpertDown:
        L->ed[s.expert] = d;
        break;
      case WeightRole::kSharedGate:
        L->sg = d;
        break;
      case WeightRole::kSharedUp:
        L->su = d;
        break;
      case WeightRole::kSharedDown:
        L->sd = d;
        break;
      default:
        break;
    }
  }
  // Pass 2: fill them from the mmapped shards on parallel workers, each with a pinned staging buffer and its
  // own stream. bf16 (and fp32 router) tensors are copied as stored; other dtypes (fp8 + scales, fp16, fp32)
  // are converted on the host first.
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    constexpr size_t kStage = 64u << 20;
    void* stage = nullptr;
    cudaStream_t st = nullptr;
    try {
      M3_CUDA_CHECK(cudaMallocHost(&stage, kStage));
      M3_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      for (size_t i; (i = next++) < specs.size();) {
        const TensorRef& ref = ckpt.at(names[i]);
        const DType want = fp32[i] ? DType::kF32 : DType::kBF16;
        std::vector<uint8_t> converted;
        const uint8_t* src = ref.file->tensor_data(*ref.info);
        if (ref.info->dtype != want || ref.info->shape != specs[i].shape) {
          const std::vector<float> f =
              ckpt.read_f32(names[i], specs[i].shape, c.quant_block);  // checks the shape
          converted.resize(size[i]);
          if (fp32[i])
            std::memcpy(converted.data(), f.data(), size[i]);
          else
            for (size_t k = 0; k < f.size(); ++k)
              reinterpret_cast<uint16_t*>(converted.data())[k] = f32_to_bf16(f[k]);
          src = converted.data();
        }
        for (uint64_t off = 0; off < size[i]; off += kStage) {
          const size_t n = size_t(std::min<uint64_t>(kStage, size[i] - off));
          std::memcpy(stage, src + off, n);
          M3_CUDA_CHECK(
              cudaMemcpyAsync(static_cast<uint8_t*>(dst[i]) + off, stage, n, cudaMemcpyHostToDevice, st));
          M3_CUDA_CHECK(cudaStreamSynchronize(st));
          done += n;
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = specs.size();
    }
    if (st) cudaStreamDestroy(st);
    if (stage) cudaFreeHost(stage);
  };
  const unsigned workers = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) pool.emplace_back(worker);
  const bool tty = isatty(2);
  auto last_print = t0;
  while (done.load() < total && !error) {  // progress bar on a terminal, redrawn every 200 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto now = std::chrono::steady_clock::now();
    if (!tty || now - last_print < std::chrono::milliseconds(200)) continue;
    last_print = now;
    const double secs = std::chrono::duration<double>(now - t0).count();
    const double frac = double(done.load()) / double(std::max<uint64_t>(total, 1));
    std::fprintf(stderr, "\rloading weights [%-30s] %3.0f%% %.1f/%.1f GB %.2f GB/s",
                 std::string(size_t(frac * 30), '#').c_str(), frac * 100, done.load() / 1e9, total / 1e9,
                 done.load() / 1e9 / std::max(secs, 1e-9));
  }
  for (auto& t : pool) t.join();
  if (tty) std::fprintf(stderr, "\n");
  if (error) std::rethrow_exception(error);
  const double bytes = double(total);
  if (c.tie_word_embeddings) m.lm_head = m.embed;
  Rope rope(c.rotary_dim, c.rope_theta);
  m.inv_freq = m.upload_f32(rope.inv_freq());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("cuda: loaded ", specs.size(), " tensors, ", bytes / 1e9, " GB in ", secs, " s (",
           bytes / 1e9 / secs, " GB/s)");

  // KV pool: K and V (and index keys for MSA layers) per page, bf16.
  const int P = c.msa.block_size;
  size_t page_bytes = 0;
  for (int l = 0; l < c.num_layers; ++l)
    page_bytes += size_t(P) * (2 * c.kv_size() + (c.sparse_attention[l] ? c.msa.index_head_dim : 0)) * 2;
  if (num_kv_pages <= 0) {
    size_t free_b = 0, total_b = 0;
    M3_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double budget =
        double(free_b) - (1.0 - gpu_memory_utilization) * double(total_b) - 2e9;  // 2 GB workspace
    num_kv_pages = static_cast<int>(std::max(1.0, budget / double(page_bytes)));
  }
  num_pages_ = num_kv_pages;
  for (int l = 0; l < c.num_layers; ++l) {
    Impl::Layer& L = m.layers[l];
    const size_t slots = size_t(num_pages_) * P;
    L.k_cache = m.own<bf16>(slots * c.kv_size());
    L.v_cache = m.own<bf16>(slots * c.kv_size());
    if (c.sparse_attention[l]) L.idx_cache = m.own<bf16>(slots * c.msa.index_head_dim);
  }
  log_info("cuda: KV pool ", num_pages_, " pages x ", P, " tokens = ", int64_t(num_pages_) * P, " tokens (",
           double(page_bytes) * num_pages_ / 1e9, " GB)");
}

CudaModel::~CudaModel() = default;

ForwardOutput CudaModel::forward(const ForwardBatch& batch, const ForwardOptions& options) {
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  const int T = static_cast<int>(batch.token_ids.size()), H = c.hidden_size, D = c.head_dim;
  const int Hq = c.num_heads, Hkv = c.num_kv_heads, P = c.msa.block_size;
  const int Hi = c.msa.num_index_heads, Di = c.msa.index_head_dim, topk = c.msa.topk_blocks;

  // Batch metadata.
  std::vector<int32_t> seq(T), pos(T), logit_rows;
  int max_blocks = 1, max_pos = 0;
  for (const SeqChunk& s : batch.seqs)
    max_blocks = std::max<int>(max_blocks, static_cast<int>(s.block_table.size()));
  std::vector<int32_t> tables(batch.seqs.size() * size_t(max_blocks), 0);
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqChunk& s = batch.seqs[i];
    if (s.token_offset < 0 || s.num_tokens <= 0 || s.token_offset + s.num_tokens > T)
      fail(ErrorKind::kInternal, "forward batch chunk out of range");
    if (int64_t(s.block_table.size()) * P < s.start_pos + s.num_tokens)
      fail(ErrorKind::kInternal, "block table too short");
    for (size_t b = 0; b < s.block_table.size(); ++b) {
      if (s.block_table[b] < 0 || s.block_table[b] >= num_pages_)
        fail(ErrorKind::kInternal, "invalid page id");
      tables[i * max_blocks + b] = s.block_table[b];
    }
    for (int k = 0; k < s.num_tokens; ++k) {
      seq[s.token_offset + k] = static_cast<int32_t>(i);
      pos[s.token_offset + k] = static_cast<int32_t>(s.start_pos + k);
      max_pos = std::max<int>(max_pos, static_cast<int>(s.start_pos + k));
    }
    if (s.want_logits) logit_rows.push_back(s.token_offset + s.num_tokens - 1);
  }
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= c.vocab_size)
      fail(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) + " out of range");
  cuda::TokenMeta meta{m.to_device("meta.seq", seq), m.to_device("meta.pos", pos),
                       m.to_device("meta.tables", tables), max_blocks};
  const int32_t* ids = m.to_device("meta.ids", batch.token_ids);
  const int R = static_cast<int>(logit_rows.size());

  float* h = m.buf<float>("h", size_t(T) * H);
  bf16* a = m.buf<bf16>("a", size_t(T) * H);
  float* a32 = m.buf<float>("a32", size_t(T) * H);
  float* q = m.buf<float>("q", size_t(T) * Hq * D);
  float* k = m.buf<float>("k", size_t(T) * Hkv * D);
  float* v = m.buf<float>("v", size_t(T) * Hkv * D);
  float* attn = m.buf<float>("attn", size_t(T) * Hq * D);
  bf16* attn_bf = m.buf<bf16>("attn_bf", size_t(T) * Hq * D);
  float* delta = m.buf<float>("delta", size_t(T) * H);
  cuda::embed_rows(m.embed, ids, T, H, h, m.stream);

  ForwardOutput out;
  auto trace = [&] {
    if (!options.trace_hidden) return;
    out.hidden_trace.resize(R);
    for (int r = 0; r < R; ++r) {
      std::vector<float> row(H);
      M3_CUDA_CHECK(cudaMemcpyAsync(row.data(), h + size_t(logit_rows[r]) * H, H * 4, cudaMemcpyDeviceToHost,
                                    m.stream));
      M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
      out.hidden_trace[r].push_back(std::move(row));
    }
  };
  trace();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int l = 0; l < c.num_layers; ++l) {
    const Impl::Layer& L = m.layers[l];
    cuda::rms_norm(h, L.in_norm, T, H, c.rms_norm_eps, a, nullptr, m.stream);
    m.gemm(a, T, H, L.q, Hq * D, q);
    m.gemm(a, T, H, L.k, Hkv * D, k);
    m.gemm(a, T, H, L.v, Hkv * D, v);
    cuda::head_norm_rope(q, L.q_norm, m.inv_freq, meta.pos, T, Hq, D, c.rotary_dim, c.rms_norm_eps, m.stream);
    cuda::head_norm_rope(k, L.k_norm, m.inv_freq, meta.pos, T, Hkv, D, c.rotary_dim, c.rms_norm_eps,
                         m.stream);
    cuda::write_pages(k, L.k_cache, meta, T, Hkv * D, P, m.stream);
    cuda::write_pages(v, L.v_cache, meta, T, Hkv * D, P, m.stream);
    int32_t* sel = nullptr;
    if (c.sparse_attention[l]) {
      float* iq = m.buf<float>("iq", size_t(T) * Hi * Di);
      float* ik = m.buf<float>("ik", size_t(T) * Di);
      m.gemm(a, T, H, L.iq, Hi * Di, iq);
      m.gemm(a, T, H, L.ik, Di, ik);
      cuda::head_norm_rope(iq, L.iq_norm, m.inv_freq, meta.pos, T, Hi, Di, c.rotary_dim, c.rms_norm_eps,
                           m.stream);
      cuda::head_norm_rope(ik, L.ik_norm, m.inv_freq, meta.pos, T, 1, Di, c.rotary_dim, c.rms_norm_eps,
                           m.stream);
      cuda::write_pages(ik, L.idx_cache, meta, T, Di, P, m.stream);
      const int stride = max_pos / P + 1;
      float* scores = m.buf<float>("msa.scores", size_t(T) * Hi * stride);
      sel = m.buf<int32_t>("msa.sel", size_t(T) * Hi * topk);
      cuda::msa_block_scores(iq, L.idx_cache, meta, T, Hi, Di, P, stride, scores, m.stream);
      cuda::msa_select(scores, meta, T, Hi, stride, P, topk, c.msa.local_blocks, c.msa.init_blocks, sel,
                       m.stream);
      if (options.trace_msa) {
        std::vector<int32_t> hs(size_t(T) * Hi * topk);
        M3_CUDA_CHECK(cudaMemcpyAsync(hs.data(), sel, hs.size() * 4, cudaMemcpyDeviceToHost, m.stream));
        M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
        std::vector<BlockSelection> layer(T, BlockSelection(Hi));
        for (int t = 0; t < T; ++t)
          for (int g = 0; g < Hi; ++g)
            for (int i = 0; i < topk; ++i)
              if (int32_t b = hs[(size_t(t) * Hi + g) * topk + i]; b >= 0) layer[t][g].push_back(b);
        out.msa_trace.push_back(std::move(layer));
      }
    } else if (options.trace_msa) {
      out.msa_trace.emplace_back();
    }
    cuda::paged_attention(q, L.k_cache, L.v_cache, meta, sel, topk, T, Hq, Hkv, D, P, scale, attn, m.stream);
    cuda::f32_to_bf16(attn, attn_bf, int64_t(T) * Hq * D, m.stream);
    m.gemm(attn_bf, T, Hq * D, L.o, H, delta);
    cuda::add_inplace(h, delta, int64_t(T) * H, m.stream);

    cuda::rms_norm(h, L.post_norm, T, H, c.rms_norm_eps, a, c.moe[l] ? a32 : nullptr, m.stream);
    if (options.trace_moe) out.moe_trace.emplace_back(c.moe[l] ? T : 0);
    if (c.moe[l])
      m.moe(L, a, a32, T, delta, options.trace_moe ? &out.moe_trace.back() : nullptr);
    else
      m.mlp(a, T, L.mlp_gate, L.mlp_up, L.mlp_down, c.dense_intermediate_size, delta, "dense");
    cuda::add_inplace(h, delta, int64_t(T) * H, m.stream);
    trace();
  }

  out.vocab = c.vocab_size;
  out.logits.resize(size_t(R) * c.vocab_size);
  if (R > 0) {
    int32_t* rows = m.to_device("meta.logit_rows", logit_rows);
    float* last = m.buf<float>("last", size_t(R) * H);
    bf16* last_bf = m.buf<bf16>("last_bf", size_t(R) * H);
    float* logits = m.buf<float>("logits", size_t(R) * c.vocab_size);
    cuda::gather_rows_f32(h, rows, R, H, last, m.stream);
    cuda::rms_norm(last, m.final_norm, R, H, c.rms_norm_eps, last_bf, nullptr, m.stream);
    m.gemm(last_bf, R, H, m.lm_head, c.vocab_size, logits);
    M3_CUDA_CHECK(
        cudaMemcpyAsync(out.logits.data(), logits, out.logits.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  }
  M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  M3_CUDA_CHECK(cudaGetLastError());
  return out;
}

}  // namespace m3
