// The CUDA backend's step: batch metadata, the per-layer launch sequence, CUDA graphs for decode steps (one
// per batch-size bucket and block-table width bucket, captured on first use and replayed), the memory plan,
// and the logits read-back.
#include "model/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/log.h"
#include "kernels/attention_plan.h"
#include "kernels/sampling.h"
#include "model/cuda_model_impl.h"
#include "model/rope.h"

namespace m3 {
namespace {

using cuda::bf16;

int next_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

// What one launch sequence needs: device metadata and the shape parameters that fix its launch grids.
struct StepArgs {
  int T = 0;  // tokens (graph steps: the bucket size, padding included)
  cuda::TokenMeta meta{};
  const int32_t* ids = nullptr;  // [T]
  const int32_t* logit_rows = nullptr;
  int R = 0;                            // logits rows
  int score_stride = 0;                 // MSA block-score row length (>= blocks visible to any token)
  int64_t max_kv_len = 0;               // bound on any token's key range (graph-safe attention planning)
  cuda::AttentionTiles tiles;           // device copy of the attention plan
  int max_tokens_per_seq = 0;           // 1: every sequence brings one token (the MSA scorer's decode path)
  std::vector<int32_t> trace_rows;      // host copy of logit_rows (traces only)
  const ForwardBatch* batch = nullptr;  // for its embed rows (image / video features); eager steps only
};

}  // namespace

struct CudaModel::Graphs {
  struct Entry {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
  };
  std::map<std::pair<int, int>, Entry> entries;  // (batch bucket, table width) -> graph
  ~Graphs() {
    for (auto& [k, e] : entries)
      if (e.exec) cudaGraphExecDestroy(e.exec);
  }
};

void CudaModel::Impl::gemm(const bf16* A, int T, int K, const bf16* W, int N, float* C) {
  if (T == 0) return;
  const float one = 1.0f, zero = 0.0f;
  M3_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, CUDA_R_16BF, K, A,
                               CUDA_R_16BF, K, &zero, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

void CudaModel::Impl::linear(const bf16* A, int T, int K, const Weight& W, int N, float* C) {
  if (!W.fp8()) return gemm(A, T, K, W.w, N, C);
  if (T == 0) return;
  if (T <= kFp8GemvMaxTokens && N % 16 == 0) return cuda::linear_gemv(nullptr, W.mx(), N, K, A, T, C, stream);
  // Prefill-sized: the weights widened to bf16 (exact), then the bf16 GEMM. An FP8 GEMM reading the weights
  // directly measured slower than this (docs/performance.md).
  bf16* wide = buf<bf16>("fp8.wide", size_t(N) * K);
  cuda::dequantize_mxfp8(W.mx(), N, K, wide, stream);
  gemm(A, T, K, wide, N, C);
}

void CudaModel::Impl::gemm_f32(const float* A, int T, int K, const float* W, int N, float* C) {
  if (T == 0) return;
  const float one = 1.0f, zero = 0.0f;
  M3_CUBLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, K, A, K, &zero, C, N));
}

namespace {

// The launch sequence of one step: every layer, the final norm and the LM head into the "logits" buffer.
void enqueue_step(CudaModel::Impl& m, const ModelConfig& c, const StepArgs& a, const ForwardOptions& options,
                  ForwardOutput& out) {
  // The shard's heads (all of them with one rank); the index query heads are one per KV group.
  const int T = a.T, H = c.hidden_size, D = c.head_dim, Hq = m.hq, Hkv = m.hkv;
  const int P = c.msa.block_size, Hi = m.hkv, Di = c.msa.index_head_dim, topk = c.msa.topk_blocks;
  const cuda::TokenMeta& meta = a.meta;
  cudaStream_t s = m.stream;
  float* h = m.buf<float>("h", size_t(T) * H);
  bf16* x = m.buf<bf16>("x", size_t(T) * H);
  float* x32 = m.buf<float>("x32", size_t(T) * H);
  float* proj = m.buf<float>("proj", size_t(T) * m.max_n_in);
  float* q = m.buf<float>("q", size_t(T) * Hq * D);
  bf16* attn = m.buf<bf16>("attn", size_t(T) * Hq * D);
  size_t ws_floats = 0;
  for (bool sparse : {false, true})
    ws_floats =
        std::max(ws_floats, cuda::paged_attention_workspace_floats(a.tiles, T, Hq, Hkv, D, P, sparse, topk,
                                                                   int(a.max_kv_len), m.opt.kv_fp8));
  float* attn_ws = ws_floats ? m.buf<float>("attn.ws", ws_floats) : nullptr;
  float* delta = m.buf<float>("delta", size_t(T) * H);
  cuda::embed_rows(m.embed, a.ids, T, H, int(m.shard.vocab.begin), int(m.shard.vocab.end), h, s);
  m.reduce(h, size_t(T) * H);
  if (a.batch)
    for_each_embed_run(
        *a.batch, H, [&](int32_t row, int32_t rows, const float* v) {  // image / video features
          M3_CUDA_CHECK(
              cudaMemcpyAsync(h + size_t(row) * H, v, size_t(rows) * H * 4, cudaMemcpyHostToDevice, s));
        });

  auto trace = [&] {
    if (!options.trace_hidden) return;
    out.hidden_trace.resize(a.R);
    for (int r = 0; r < a.R; ++r) {
      std::vector<float> row(H);
      M3_CUDA_CHECK(
          cudaMemcpyAsync(row.data(), h + size_t(a.trace_rows[r]) * H, H * 4, cudaMemcpyDeviceToHost, s));
      M3_CUDA_CHECK(cudaStreamSynchronize(s));
      out.hidden_trace[r].push_back(std::move(row));
    }
  };
  trace();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int l = 0; l < c.num_layers; ++l) {
    const CudaModel::Impl::Layer& L = m.layers[l];
    // The previous layer's FFN output joins the residual here, fused with this layer's input norm.
    if (l == 0)
      cuda::rms_norm(h, L.in_norm, T, H, c.rms_norm_eps, x, nullptr, s);
    else
      cuda::add_rms_norm(h, delta, L.in_norm, T, H, c.rms_norm_eps, x, nullptr, s);
    if (l > 0) trace();
    m.linear(x, T, H, L.w_in, L.n_in, proj);
    // q, k, v (and the index branch's q and k) out of the fused projection: norms, RoPE and the page writes
    // of k, v and the index key in one launch.
    cuda::HeadPrep prep;
    prep.seg[0] = {0, Hq, D, L.q_norm, q, nullptr};
    prep.seg[1] = {Hq * D, Hkv, D, L.k_norm, nullptr, L.k_cache, L.k8, L.k_scale};
    prep.seg[2] = {(Hq + Hkv) * D, Hkv, D, nullptr, nullptr, L.v_cache, L.v8, L.v_scale};
    int32_t* sel = nullptr;
    float* iq = nullptr;
    if (c.sparse_attention[l]) {
      iq = m.buf<float>("iq", size_t(T) * Hi * Di);
      const int col = (Hq + 2 * Hkv) * D;
      prep.seg[3] = {col, Hi, Di, L.iq_norm, iq, nullptr};
      prep.seg[4] = {col + Hi * Di, 1, Di, L.ik_norm, nullptr, L.idx_cache};
    }
    m.wait_page_copies(l);  // this layer's host tier copies land before its pages are written or read
    cuda::prepare_heads(proj, L.n_in, prep, m.inv_freq, meta, T, c.rotary_dim, c.rms_norm_eps, P, s);
    if (c.sparse_attention[l]) {
      float* scores = m.buf<float>("msa.scores", size_t(T) * Hi * a.score_stride);
      sel = m.buf<int32_t>("msa.sel", size_t(T) * Hi * topk);
      cuda::msa_block_scores(iq, L.idx_cache, meta, T, Hi, Di, P, a.score_stride, scores, s,
                             a.max_tokens_per_seq);
      cuda::msa_select(scores, meta, T, Hi, a.score_stride, P, topk, c.msa.local_blocks, c.msa.init_blocks,
                       sel, s);
      if (options.trace_msa) {
        std::vector<int32_t> hs(size_t(T) * Hi * topk);
        M3_CUDA_CHECK(cudaMemcpyAsync(hs.data(), sel, hs.size() * 4, cudaMemcpyDeviceToHost, s));
        M3_CUDA_CHECK(cudaStreamSynchronize(s));
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
    cuda::paged_attention(q, L.kv(), meta, sel, topk, a.tiles, T, Hq, Hkv, D, P, int(a.max_kv_len), scale,
                          attn_ws, attn, s);
    m.linear(attn, T, Hq * D, L.o, H, delta);
    m.reduce(delta, size_t(T) * H);  // row-parallel o-projection
    cuda::add_rms_norm(h, delta, L.post_norm, T, H, c.rms_norm_eps, x, c.moe[l] ? x32 : nullptr, s);
    if (options.trace_moe) out.moe_trace.emplace_back(c.moe[l] ? T : 0);
    if (c.moe[l] && m.shard.dp_size > 1)
      m.moe_exchange(L, x, x32, T, delta);
    else if (c.moe[l])
      m.moe(L, x, x32, T, delta, true, options.trace_moe ? &out.moe_trace.back() : nullptr);
    else
      m.mlp(x, T, L.mlp_w13, L.mlp_w2, m.dense_i, delta, "dense");
    m.reduce(delta, size_t(T) * H);  // row-parallel down projections
  }
  cuda::add_inplace(h, delta, int64_t(T) * H, s);
  trace();
  if (a.R > 0) {
    float* last = m.buf<float>("last", size_t(a.R) * H);
    bf16* last_bf = m.buf<bf16>("last_bf", size_t(a.R) * H);
    float* logits = m.buf<float>("logits", size_t(a.R) * c.vocab_size);
    cuda::gather_rows_f32(h, a.logit_rows, a.R, H, last, s);
    cuda::rms_norm(last, m.final_norm, a.R, H, c.rms_norm_eps, last_bf, nullptr, s);
    if (m.shard.tp_size == 1) {
      m.gemm(last_bf, a.R, H, m.lm_head, c.vocab_size, logits);
    } else {  // vocabulary-parallel: each rank scores its (zero-padded) rows; gather [rank][R][rows]
      const int per = m.vocab_rows, tp = m.shard.tp_size;
      float* part = m.buf<float>("logits.part", size_t(a.R) * per);
      float* all = m.buf<float>("logits.all", size_t(tp) * a.R * per);
      m.gemm(last_bf, a.R, H, m.lm_head, per, part);
      m.nccl->all_gather(part, size_t(a.R) * per * 4, all, s);
      for (int r = 0; r < tp; ++r) {
        const int cols = int(std::min<int64_t>(per, c.vocab_size - int64_t(r) * per));
        if (cols > 0)
          M3_CUDA_CHECK(cudaMemcpy2DAsync(logits + size_t(r) * per, size_t(c.vocab_size) * 4,
                                          all + size_t(r) * a.R * per, size_t(per) * 4, size_t(cols) * 4, a.R,
                                          cudaMemcpyDeviceToDevice, s));
      }
    }
  }
}

}  // namespace

CudaModel::CudaModel(ModelConfig config, const Checkpoint* ckpt, const CudaModelOptions& options,
                     uint64_t random_seed)
    : config_(std::move(config)),
      impl_(std::make_unique<Impl>(config_)),
      graphs_(std::make_unique<Graphs>()) {
  const ModelConfig& c = config_;
  auto unsupported = [](const std::string& what) {
    fail(ErrorKind::kUnsupported, "the CUDA backend " + what);
  };
  if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    unsupported("supports head_dim 32, 64, 128 or 256 (got " + std::to_string(c.head_dim) + ")");
  if (c.msa.topk_blocks > 64) unsupported("supports at most 64 MSA top-k blocks");
  if (c.hidden_size % 16 != 0) unsupported("needs hidden_size % 16 == 0");
  Impl& m = *impl_;
  m.opt = options;
  m.shard = options.shard ? *options.shard : make_shard_layout(c, 1, 0);
  m.hq = int(m.shard.q_heads.size());
  m.hkv = int(m.shard.kv_heads.size());
  m.dense_i = int(m.shard.dense_intermediate.size());
  m.expert_i = int(m.shard.expert_intermediate.size());
  m.shared_i = int(m.shard.shared_intermediate.size());
  m.vocab_rows = int((c.vocab_size + m.shard.tp_size - 1) / m.shard.tp_size);
  for (int inter : {m.dense_i, m.expert_i, m.shared_i})
    if (inter % 8 != 0)
      unsupported("needs intermediate sizes (per rank) that are multiples of 8 (got " +
                  std::to_string(inter) + ")");
  if (c.num_experts > 256 || c.experts_per_token > 16) unsupported("supports at most 256 experts and top-16");
  M3_CUDA_CHECK(cudaSetDevice(options.device));
  if (options.device_comm) {
    m.nccl = options.device_comm;
  } else if (options.ranks && options.ranks->size() > 1) {
#ifdef M3_HAVE_NCCL
    m.nccl = dist::with_one_shot_all_reduce(dist::connect_nccl(*options.ranks), *options.ranks);
#else
    unsupported("was built without nccl.h: no tensor parallelism");
#endif
  }
  if (m.opt.max_model_len <= 0) m.opt.max_model_len = c.max_position_embeddings;
  M3_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  M3_CUBLAS_CHECK(cublasCreate(&m.blas));
  M3_CUBLAS_CHECK(cublasSetStream(m.blas, m.stream));
  M3_CUBLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));
  constexpr size_t kBlasWorkspace = 32u << 20;  // fixed, so cuBLAS calls can be captured in graphs
  M3_CUDA_CHECK(cudaMalloc(&m.blas_workspace, kBlasWorkspace));
  M3_CUBLAS_CHECK(cublasSetWorkspace(m.blas, m.blas_workspace, kBlasWorkspace));
  size_t free0 = 0, total_mem = 0;
  M3_CUDA_CHECK(cudaMemGetInfo(&free0, &total_mem));
  m.load_weights(ckpt, random_seed);
  Rope rope(c.rotary_dim, c.rope_theta);
  const std::vector<float> inv = rope.inv_freq();
  m.inv_freq = m.own<float>(inv.size());
  M3_CUDA_CHECK(cudaMemcpy(m.inv_freq, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
  m.route_ticket = m.own<unsigned>(1);
  M3_CUDA_CHECK(cudaMemset(m.route_ticket, 0, sizeof(unsigned)));
  m.expert_tokens = m.own<unsigned long long>(c.num_experts);
  M3_CUDA_CHECK(cudaMemset(m.expert_tokens, 0, size_t(c.num_experts) * 8));
  size_t free1 = 0;
  M3_CUDA_CHECK(cudaMemGetInfo(&free1, &total_mem));
  const double weights_gb = double(free0 - free1) / 1e9;

  const int P = c.msa.block_size;
  const size_t page_bytes = m.kv_bytes_per_page();
  if (options.num_kv_pages > 0) {
    num_pages_ = options.num_kv_pages;
  } else {
    // Memory plan: weights are resident; profile the largest prefill chunk and the largest decode batch so
    // the activation and workspace peak is allocated, then give the KV pool what --gpu-memory-utilization
    // leaves.
    const int T = int(std::min<int64_t>(std::max(1, m.opt.max_num_batched_tokens), m.opt.max_model_len));
    const int B = std::min(std::max(1, m.opt.max_num_seqs), kGemvMaxTokens);
    num_pages_ = std::max((T + P - 1) / P, B);
    m.allocate_kv(num_pages_ + 1);
    m.min_score_stride = int((m.opt.max_model_len + P - 1) / P);
    std::vector<int32_t> table(num_pages_);
    for (int i = 0; i < num_pages_; ++i) table[i] = i;
    ForwardBatch prefill;
    prefill.token_ids.assign(T, 0);
    prefill.seqs.push_back({0, T, 0, std::span<const int32_t>(table.data(), size_t((T + P - 1) / P)), true});
    if (m.shard.dp_size > 1) m.dp_tokens.assign(m.shard.dp_size, T);  // every rank's largest step at once
    run(prefill, {}, true);
    if (m.shard.dp_size > 1) m.dp_tokens.assign(m.shard.dp_size, B);
    ForwardBatch decode;
    decode.token_ids.assign(B, 0);
    for (int b = 0; b < B; ++b)
      decode.seqs.push_back({b, 1, 0, std::span<const int32_t>(table.data() + b, 1), true});
    run(decode, {}, true);
    m.min_score_stride = 0;
    M3_CUDA_CHECK(cudaMemset(m.expert_tokens, 0, size_t(c.num_experts) * 8));  // the profile's routing
    m.free_kv();
    size_t free_b = 0;
    M3_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_mem));
    const double budget = double(free_b) - (1.0 - m.opt.gpu_memory_utilization) * double(total_mem);
    num_pages_ = int(std::max(1.0, budget / double(page_bytes) - 1));
    log_info("cuda: memory plan: weights ", weights_gb, " GB, activations + workspace ",
             m.scratch_bytes() / 1e9, " GB (profiled at ", T, " tokens and a decode batch of ", B,
             "), KV pool from ", m.opt.gpu_memory_utilization, " x ", total_mem / 1e9, " GB");
  }
  m.allocate_kv(num_pages_ + 1);
  m.allocate_host_tier(options.num_host_kv_pages);
  const int64_t tokens = int64_t(num_pages_) * P;
  log_info("cuda: KV pool ", num_pages_, " pages x ", P, " tokens = ", tokens, " tokens (",
           m.opt.kv_fp8 ? "FP8" : "bf16", " K/V, ", double(page_bytes) * num_pages_ / 1e9,
           " GB): ", tokens / std::max<int64_t>(1, m.opt.max_model_len), " sequences of max_model_len ",
           m.opt.max_model_len, " fit");
}

CudaModel::~CudaModel() = default;

std::vector<int64_t> CudaModel::expert_token_counts() const {
  const Impl& m = *impl_;
  std::vector<unsigned long long> n(config_.num_experts);
  M3_CUDA_CHECK(cudaSetDevice(m.opt.device));
  M3_CUDA_CHECK(cudaMemcpyAsync(n.data(), m.expert_tokens, n.size() * 8, cudaMemcpyDeviceToHost, m.stream));
  M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return std::vector<int64_t>(n.begin(), n.end());
}

int CudaModel::data_parallel_size() const {
  return impl_->shard.dp_size;
}

int CudaModel::num_host_kv_pages() const {
  return impl_->host.slots;
}

MemoryUse CudaModel::memory_use() const {
  return {impl_->weight_bytes, impl_->kv_bytes_per_page() * size_t(num_pages_ + 1)};
}

ForwardOutput CudaModel::forward(const ForwardBatch& batch, const ForwardOptions& options) {
  Impl& m = *impl_;
  const int dp = m.shard.dp_size;
  if (dp == 1) return run(batch, options, false);
  if (options.trace_hidden || options.trace_msa || options.trace_moe)
    fail(ErrorKind::kUnsupported, "forward traces need --data-parallel-size 1");
  // Data-parallel attention: this rank's sequences; a rank with none runs one dummy token on the spare page
  // so that it joins every MoE layer's exchange. Every rank derives every rank's count from the same batch.
  const DpSplit split = split_by_dp_rank(batch, dp);
  m.dp_tokens.resize(dp);
  for (int r = 0; r < dp; ++r) m.dp_tokens[r] = std::max(1, split.tokens(r));
  ForwardBatch local = dp_local_batch(batch, split, m.shard.dp_rank);
  const std::vector<int32_t> spare = {num_pages_};
  if (local.seqs.empty()) {
    local.token_ids = {0};
    local.seqs.push_back({0, 1, 0, spare, false});
  }
  ForwardOutput mine = run(local, options, false);
  // Every rank's rows, in batch order, on every rank.
  ForwardOutput out;
  out.vocab = mine.vocab;
  std::vector<size_t> bytes(dp);
  const size_t row = batch.sampling.empty() ? size_t(out.vocab) * sizeof(float) : sizeof(int32_t);
  for (int r = 0; r < dp; ++r) bytes[r] = size_t(split.rows(r)) * row;
  if (batch.sampling.empty()) {
    out.logits.resize(size_t(split.row_begin.back()) * out.vocab);
    m.opt.ranks->all_gather_varying(mine.logits.data(), bytes, out.logits.data());
  } else {
    out.sampled.resize(split.row_begin.back());
    m.opt.ranks->all_gather_varying(mine.sampled.data(), bytes, out.sampled.data());
  }
  return out;
}

ForwardOutput CudaModel::run(const ForwardBatch& batch, const ForwardOptions& options, bool profile) {
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  M3_CUDA_CHECK(cudaSetDevice(m.opt.device));  // the engine's thread is not the one that built the model
  const int T = static_cast<int>(batch.token_ids.size()), P = c.msa.block_size;
  const int S = static_cast<int>(batch.seqs.size());

  // Batch metadata, validated.
  std::vector<int32_t> seq(T), pos(T), logit_rows;
  int max_blocks = 1, max_pos = 0;
  bool decode = !profile;
  for (const SeqChunk& s : batch.seqs) {
    max_blocks = std::max<int>(max_blocks, static_cast<int>(s.block_table.size()));
    decode &= s.num_tokens == 1 && s.want_logits;
  }
  for (int i = 0; i < S; ++i) {
    const SeqChunk& s = batch.seqs[i];
    if (s.token_offset < 0 || s.num_tokens <= 0 || s.token_offset + s.num_tokens > T)
      fail(ErrorKind::kInternal, "forward batch chunk out of range");
    if (int64_t(s.block_table.size()) * P < s.start_pos + s.num_tokens)
      fail(ErrorKind::kInternal, "block table too short");
    for (int32_t b : s.block_table)
      if (b < 0 || b > num_pages_ || (b == num_pages_ && m.shard.dp_size == 1))  // DP's dummy: the spare
        fail(ErrorKind::kInternal, "invalid page id");
    for (int k = 0; k < s.num_tokens; ++k) {
      seq[s.token_offset + k] = i;
      pos[s.token_offset + k] = static_cast<int32_t>(s.start_pos + k);
      max_pos = std::max<int>(max_pos, static_cast<int>(s.start_pos + k));
    }
    if (s.want_logits) logit_rows.push_back(s.token_offset + s.num_tokens - 1);
  }
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= c.vocab_size)
      fail(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) + " out of range");
  const bool tracing = options.trace_hidden || options.trace_msa || options.trace_moe;
  // Data-parallel attention runs eagerly: its MoE exchanges depend on every rank's token count.
  decode =
      decode && T == S && !tracing && m.opt.cuda_graphs && m.shard.dp_size == 1 &&
      T <= std::min(m.opt.max_num_seqs, kGemvMaxTokens) &&
      batch.page_copies.empty() &&  // a step with host tier copies runs eagerly (it waits on their events)
      batch.embed_rows.empty();

  StepArgs a;
  a.batch = &batch;
  std::vector<int32_t> ids(batch.token_ids);
  int width = max_blocks;
  int rows_T = T;
  if (decode) {  // pad to the bucket; padding rows read and write only the spare page num_pages_
    rows_T = next_pow2(T);
    width = std::max(16, next_pow2(max_blocks));
    for (int i = T; i < rows_T; ++i) {
      seq.push_back(S + (i - T));
      pos.push_back(0);
      ids.push_back(0);
      logit_rows.push_back(i);
    }
  }
  const int rows_S = S + (rows_T - T);
  std::vector<int32_t> tables(size_t(rows_S) * width, num_pages_);
  for (int i = 0; i < S; ++i)
    std::copy(batch.seqs[i].block_table.begin(), batch.seqs[i].block_table.end(),
              tables.begin() + size_t(i) * width);
  a.T = rows_T;
  a.meta = {m.to_device("meta.seq", seq), m.to_device("meta.pos", pos), m.to_device("meta.tables", tables),
            width};
  a.ids = m.to_device("meta.ids", ids);
  a.R = static_cast<int>(logit_rows.size());
  a.logit_rows = m.to_device("meta.logit_rows", logit_rows);
  a.trace_rows = logit_rows;
  a.score_stride = decode ? width : std::max(max_pos / P + 1, m.min_score_stride);
  a.max_kv_len = int64_t(decode ? width : max_pos / P + 1) * P;
  std::vector<cuda::TokenRange> ranges;
  for (const SeqChunk& sc : batch.seqs) {
    ranges.push_back({sc.token_offset, sc.num_tokens});
    a.max_tokens_per_seq = std::max<int>(a.max_tokens_per_seq, sc.num_tokens);
  }
  for (int i = T; i < rows_T; ++i) ranges.push_back({i, 1});
  const cuda::AttentionPlan plan =
      cuda::plan_attention(ranges, m.hq / m.hkv, c.head_dim);  // the shard's group
  std::vector<int32_t> tiles;
  for (const cuda::AttentionTile& t : plan.tiles) tiles.insert(tiles.end(), {t.first, t.count});
  a.tiles = {reinterpret_cast<const cuda::AttentionTile*>(m.to_device("meta.tiles", tiles)),
             int(plan.tiles.size()), plan.max_tokens};

  m.enqueue_page_copies(batch.page_copies, num_pages_);
  ForwardOutput out;
  if (!decode) {
    enqueue_step(m, c, a, options, out);
  } else {
    Graphs::Entry& g = graphs_->entries[{rows_T, width}];
    if (g.exec && g.generation == m.scratch_generation) {
      M3_CUDA_CHECK(cudaGraphLaunch(g.exec, m.stream));
    } else {
      // First use (or buffers moved): run eagerly, which sizes every buffer, then capture the same sequence.
      enqueue_step(m, c, a, options, out);
      const uint64_t generation = m.scratch_generation;
      cudaGraph_t graph = nullptr;
      M3_CUDA_CHECK(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
      ForwardOutput unused;
      enqueue_step(m, c, a, options, unused);
      M3_CUDA_CHECK(cudaStreamEndCapture(m.stream, &graph));
      if (g.exec) cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
      if (m.scratch_generation == generation) {
        M3_CUDA_CHECK(cudaGraphInstantiate(&g.exec, graph, 0));
        g.generation = generation;
      }
      cudaGraphDestroy(graph);
    }
  }
  out.vocab = c.vocab_size;
  const int R = decode ? T : a.R;  // padding rows are not returned
  float* logits = R > 0 ? m.buf<float>("logits", size_t(a.R) * c.vocab_size) : nullptr;
  if (!batch.sampling.empty()) {  // sampled on the device: only R ids come back
    if (int(batch.sampling.size()) != R)
      fail(ErrorKind::kInternal, "one sampling row per logits row expected");
    const SamplingRow* rows = m.to_device("sample.rows", batch.sampling);
    const LogitAdjustment* adj =
        batch.sampling_adjustments.empty() ? nullptr : m.to_device("sample.adj", batch.sampling_adjustments);
    int32_t* ids_out = m.buf<int32_t>("sample.out", R);
    // The grammar masks arrive last: the engine computes them on the host while the step above runs.
    const uint32_t* masks = nullptr;
    if (batch.token_masks) {
      const std::vector<uint32_t>& words = batch.token_masks();
      if (!words.empty()) masks = m.to_device("sample.masks", words);
    }
    cuda::sample_rows(logits, R, c.vocab_size, rows, adj, ids_out, m.stream, masks);
    out.sampled.resize(R);
    M3_CUDA_CHECK(cudaMemcpyAsync(out.sampled.data(), ids_out, R * 4, cudaMemcpyDeviceToHost, m.stream));
  } else {
    out.logits.resize(size_t(R) * c.vocab_size);
    if (R > 0)
      M3_CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), logits, out.logits.size() * 4, cudaMemcpyDeviceToHost,
                                    m.stream));
  }
  M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  M3_CUDA_CHECK(cudaGetLastError());
  return out;
}

}  // namespace m3
