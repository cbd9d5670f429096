// The CPU reference backend: the whole MiniMax-M3 text forward pass (spec §3) in fp32 over weights converted
// from their stored dtype, paged KV with page = MSA block, exact MSA selection per token and per KV group.
// Readable first: it is the oracle the CUDA kernels are checked against and what CI runs end to end.
#pragma once

#include <memory>
#include <vector>

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
  std::vector<float> embed, lm_head, final_norm;
  std::vector<CpuLayerWeights> layers;
};

// Reads every tensor of weight_layout(config) from the checkpoint as fp32 (dequantising MXFP8).
CpuWeights load_cpu_weights(const ModelConfig& config, const Checkpoint& ckpt);

class CpuModel : public ModelBackend {
 public:
  CpuModel(ModelConfig config, CpuWeights weights, int num_kv_pages);

  const ModelConfig& config() const override { return config_; }
  const char* device_name() const override { return "cpu"; }
  int num_kv_pages() const override { return kv_.num_pages(); }
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) override;

 private:
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
           const std::vector<float>& down, int inter, float* out);

  ModelConfig config_;
  CpuWeights w_;
  CpuKvStorage kv_;
  Rope rope_;
};

}  // namespace m3
