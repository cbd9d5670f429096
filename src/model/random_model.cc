// Preset configs and weight scales of synthetic models (see random_model.h).
#include "model/random_model.h"

#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "common/random_init.h"

namespace m3 {

ModelConfig random_model_config(const std::string& preset, const std::string& layers) {
  ModelConfig c;
  int dense = 3, sparse = 57;
  if (preset == "m3") {
    c.hidden_size = 6144, c.num_heads = 64, c.num_kv_heads = 4, c.head_dim = 128, c.rotary_dim = 64;
    c.dense_intermediate_size = 12288, c.expert_intermediate_size = 3072, c.shared_intermediate_size = 3072;
    c.num_experts = 128, c.experts_per_token = 4;
    c.msa.index_head_dim = 128;
  } else if (preset == "tiny") {
    dense = 1, sparse = 3;
    c.hidden_size = 64, c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 32, c.rotary_dim = 16;
    c.dense_intermediate_size = 128, c.expert_intermediate_size = 32, c.shared_intermediate_size = 32;
    c.num_experts = 8, c.experts_per_token = 2;
    c.msa.index_head_dim = 32;
  } else {
    fail(ErrorKind::kInvalidArgument, "--preset '" + preset + "' is not one of m3, tiny");
  }
  if (!layers.empty()) {
    auto plus = layers.find('+');
    try {
      if (plus == std::string::npos) throw std::invalid_argument("no +");
      dense = std::stoi(layers.substr(0, plus));
      sparse = std::stoi(layers.substr(plus + 1));
    } catch (const std::exception&) {
      fail(ErrorKind::kInvalidArgument, "--layers '" + layers + "' must be DENSE+SPARSE, e.g. 3+5");
    }
    if (dense < 0 || sparse < 0 || dense + sparse == 0)
      fail(ErrorKind::kInvalidArgument, "--layers needs at least one layer");
  }
  c.num_layers = dense + sparse;
  for (int l = 0; l < c.num_layers; ++l) {
    c.sparse_attention.push_back(l >= dense);
    c.moe.push_back(l >= dense);
  }
  c.vocab_size = 200064;
  c.max_position_embeddings = 1048576;
  c.rope_theta = 5e6;
  c.routed_scaling_factor = 2.0f;
  c.msa.num_index_heads = c.num_kv_heads;
  c.has_vision = true;  // the released vision_config; tiny: a tower small enough for CI
  c.vision.projector_hidden_size = c.hidden_size;
  if (preset == "tiny") {
    c.vision.hidden_size = 32, c.vision.intermediate_size = 64, c.vision.num_layers = 2,
    c.vision.num_heads = 2;
  }
  return c;
}

float random_weight_scale(const WeightSpec& s) {
  switch (s.role) {
    case WeightRole::kInputNorm:
    case WeightRole::kPostNorm:
    case WeightRole::kFinalNorm:
    case WeightRole::kQNorm:
    case WeightRole::kKNorm:
    case WeightRole::kIndexQNorm:
    case WeightRole::kIndexKNorm:
    case WeightRole::kRouterBias:
      return 0.1f;
    case WeightRole::kEmbed:
      return 1.0f;
    default:
      return 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
  }
}

uint64_t random_weight_key(uint64_t seed, const WeightSpec& s) {
  return splitmix64(seed ^ name_key(s.names[0].c_str()));
}

}  // namespace m3
