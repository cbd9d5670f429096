// The CPU reference backend: the whole MiniMax-M3 text forward pass (spec §3) in fp32 over weights converted
// from their stored dtype, paged KV with page = MSA block, exact MSA selection per token and per KV group.
// Readable first: it is the oracle the CUDA kernels are checked against and what CI runs end to end.
// Tensor parallel by construction: the model holds the shard of config/shard_layout.h (its query heads, KV
// and index heads, MLP columns and vocabulary rows) and sums its partial results over the communicator after
// the o-projection, the FFN and the embedding; with one rank the shard is the whole model and the sums are
// no-ops, so TP 1..N is one code path. With data-parallel attention (DEP) each rank runs its own sequences of
// the batch and the MoE layers gather every rank's tokens, run the rank's experts on all of them and send
// each rank its rows summed over the ranks (all-gather, then reduce-scatter).
#pragma once

#include <memory>
#include <vector>

#include "config/shard_layout.h"
#include "dist/communicator.h"
#include "loader/checkpoint.h"
#include "model/backend.h"
#include "model/cpu_kv_storage.h"
#include "model/rope.h"

namespace m3 {

struct CpuLayerWeights {
  std::vector<float> input_norm, post_norm;
  std::vector<float> q, k, v, o, q_norm, k_norm;
  std::vector<float> index_q, index_k, index_q_norm, index_k_norm;  // MSA layers
  std::vector<float> mlp_gate, mlp_up, mlp_down;                    // dense-FFN layers
  std::vector<float> router, router_bias;                           // MoE layers
  std::vector<std::vector<float>> expert_gate, expert_up, expert_down;
  std::vector<float> shared_gate, shared_up, shared_down;
};

struct CpuWeights {
  std::vector<float> embed, lm_head, final_norm;  // embed / lm_head: the shard's vocabulary rows
  std::vector<CpuLayerWeights> layers;
  size_t bytes = 0;
};

// Reads the shard's part of every tensor of weight_layout(config) from the checkpoint as fp32 (dequantising
// MXFP8). fp8: linear layers hold the values of their MXFP8 quantisation (loader/mxfp8.h), as the CUDA
// backend's FP8 weights do (--quantization fp8 of a bf16 checkpoint).
CpuWeights load_cpu_weights(const ModelConfig& config, const Checkpoint& ckpt, const ShardLayout& shard,
                            bool fp8 = false);

class CpuModel : public ModelBackend {
 public:
  // kv: what the KV cache holds (model/cpu_kv_storage.h).
  CpuModel(ModelConfig config, CpuWeights weights, int num_kv_pages, const ShardLayout& shard,
           std::shared_ptr<dist::Communicator> comm,
           CpuKvStorage::Precision kv = CpuKvStorage::Precision::kF32, int num_host_kv_pages = 0);

  const ModelConfig& config() const override { return config_; }
  const char* device_name() const override { return "cpu"; }
  int num_kv_pages() const override { return kv_.num_pages(); }
  int num_host_kv_pages() const override { return host_kv_ ? host_kv_->num_pages() : 0; }
  // With several ranks, msa_trace holds the selections of this rank's KV groups only.
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) override;
  MemoryUse memory_use() const override { return {w_.bytes, kv_.bytes()}; }
  int data_parallel_size() const override { return shard_.dp_size; }
  std::vector<int64_t> expert_token_counts() const override { return expert_tokens_; }

 private:
  // This rank's part of the batch (all of it without data-parallel attention).
  ForwardOutput forward_local(const ForwardBatch& batch, const ForwardOptions& options);
  struct TokenMeta {  // where each token of the batch lives
    int64_t pos;
    const SeqChunk* seq;
  };
  void attention_block(int layer, const float* normed, const std::vector<TokenMeta>& tokens, float* out,
                       std::vector<BlockSelection>* msa_trace);
  void sparse_select(int layer, const float* index_q, const TokenMeta& tok,
                     std::vector<std::vector<int32_t>>* sel);
  void attend(int layer, const float* q, const TokenMeta& tok, const std::vector<std::vector<int32_t>>* sel,
              float* out);
  void ffn_block(int layer, const float* normed, int64_t T, float* out,
                 std::vector<std::vector<int32_t>>* moe_trace);
  void moe(const CpuLayerWeights& w, const float* x, int64_t T, float* out,
           std::vector<std::vector<int32_t>>* trace);
  void mlp(const float* x, int64_t T, const std::vector<float>& gate, const std::vector<float>& up,
           const std::vector<float>& down, int64_t inter, float* out);
  void embed(const std::vector<int32_t>& ids, float* h);
  void lm_head(const float* x, int64_t rows, std::vector<float>* logits);

  ModelConfig config_;
  ShardLayout shard_;
  std::shared_ptr<dist::Communicator> comm_;
  CpuWeights w_;
  CpuKvStorage kv_;
  std::unique_ptr<CpuKvStorage> host_kv_;  // the prefix cache's host tier (a plain copy on this backend)
  Rope rope_;
  std::vector<size_t> dp_tokens_;       // data-parallel attention: this step's tokens on each rank
  std::vector<int64_t> expert_tokens_;  // tokens routed to each expert, over the layers and steps
};

}  // namespace m3
