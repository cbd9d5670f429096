// The tensors a MiniMax-M3 text checkpoint must hold, with their shapes and the alternative names under which
// each may be stored (the release keeps dense MLPs under mlp.*, transformers' save_pretrained writes them as
// block_sparse_moe.{gate,up,down}_proj). One list serves every backend's loader and the unexpected-tensor
// check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/shard_layout.h"
#include "loader/checkpoint.h"

namespace m3 {

enum class WeightRole {
  kEmbed,
  kLmHead,
  kFinalNorm,
  kInputNorm,
  kPostNorm,
  kQ,
  kK,
  kV,
  kO,
  kQNorm,
  kKNorm,
  kIndexQ,
  kIndexK,
  kIndexQNorm,
  kIndexKNorm,
  kMlpGate,
  kMlpUp,
  kMlpDown,
  kRouter,
  kRouterBias,
  kExpertGate,
  kExpertDown,
  kExpertUp,
  kSharedGate,
  kSharedUp,
  kSharedDown,
};

struct WeightSpec {
  WeightRole role;
  int layer = -1;                  // -1 for model-level tensors
  int expert = -1;                 // routed expert index for kExpert*
  std::vector<std::string> names;  // canonical checkpoint names, preferred first
  std::vector<int64_t> shape;
};

std::vector<WeightSpec> weight_layout(const ModelConfig& config);

// The projections of a linear layer (attention, index, MLP, expert and shared-expert weights): what an MXFP8
// checkpoint stores in FP8 and --quantization fp8 quantises. Not: embedding, LM head, norms, router.
bool is_linear(WeightRole role);
// A routed expert's gate, up or down projection (WeightSpec::expert says which expert).
bool is_routed_expert(WeightRole role);

// With an expert placement (ModelConfig::expert_placement) the routed experts' specs name the checkpoint
// expert each slot holds, and the router's rows (its weight [E, H] or bias [E], row_len H or 1) are
// reordered to match, in place, here.
void place_router_rows(const ModelConfig& config, float* rows, int64_t row_len);

// Drops the routed experts that other ranks hold (expert parallelism) from `specs` and, index for index, from
// `names` (resolve_weight_names' answer for all of them; null: none yet).
void keep_local_experts(const ShardLayout& shard, std::vector<WeightSpec>& specs,
                        std::vector<std::string>* names);

// The part of `spec` the rank of `shard` holds: column-parallel projections (q, k, v, index q, gate / up)
// keep their rows, row-parallel ones (o, down) their columns, the embedding and LM head their vocabulary
// rows; norms, the router and the index key projection are whole on every rank.
TensorCut shard_cut(const WeightSpec& spec, const ModelConfig& config, const ShardLayout& shard);

// For each spec, the name the checkpoint actually uses (error naming the tensor if none is present); then
// fails on any checkpoint tensor that no spec claims (an MXFP8 scale counts as claimed with its weight).
std::vector<std::string> resolve_weight_names(const Checkpoint& ckpt, const std::vector<WeightSpec>& specs);

}  // namespace m3
