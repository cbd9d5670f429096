// Filling CpuWeights from the checkpoint through the shared weight layout.
#include "common/error.h"
#include "common/log.h"
#include "loader/mxfp8.h"
#include "model/cpu_model.h"
#include "model/weight_layout.h"

namespace m3 {

CpuWeights load_cpu_weights(const ModelConfig& c, const Checkpoint& ckpt, const ShardLayout& shard,
                            bool fp8) {
  std::vector<WeightSpec> specs = weight_layout(c);
  std::vector<std::string> names = resolve_weight_names(ckpt, specs);
  keep_local_experts(shard, specs, &names);
  CpuWeights w;
  w.layers.resize(c.num_layers);
  for (auto& layer : w.layers) {
    layer.expert_gate.resize(c.num_experts);
    layer.expert_up.resize(c.num_experts);
    layer.expert_down.resize(c.num_experts);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    const TensorCut cut = shard_cut(s, c, shard);
    std::vector<float> data = ckpt.read_f32(names[i], s.shape, c.quant_block, cut);
    if (fp8 && is_linear(s.role)) {  // linear weights are [out, in]
      const int64_t cols = cut.dim == 1 ? cut.end - cut.begin : s.shape[1];
      if (cols % kMxfp8Block != 0)
        fail(ErrorKind::kUnsupported, "--quantization fp8: tensor '" + names[i] + "' has rows of " +
                                          std::to_string(cols) + " inputs per rank, not whole blocks of 32");
      for (size_t r = 0; r < data.size(); r += size_t(cols))
        if (!round_trip_mxfp8_row(data.data() + r, cols))
          fail(ErrorKind::kCorruptData, "tensor '" + names[i] + "' holds a value that is not finite");
    }
    w.bytes += data.size() * sizeof(float);
    CpuLayerWeights* L = s.layer >= 0 ? &w.layers[s.layer] : nullptr;
    switch (s.role) {
      case WeightRole::kEmbed:
        w.embed = std::move(data);
        break;
      case WeightRole::kLmHead:
        w.lm_head = std::move(data);
        break;
      case WeightRole::kFinalNorm:
        w.final_norm = std::move(data);
        break;
      case WeightRole::kInputNorm:
        L->input_norm = std::move(data);
        break;
      case WeightRole::kPostNorm:
        L->post_norm = std::move(data);
        break;
      case WeightRole::kQ:
        L->q = std::move(data);
        break;
      case WeightRole::kK:
        L->k = std::move(data);
        break;
      case WeightRole::kV:
        L->v = std::move(data);
        break;
      case WeightRole::kO:
        L->o = std::move(data);
        break;
      case WeightRole::kQNorm:
        L->q_norm = std::move(data);
        break;
      case WeightRole::kKNorm:
        L->k_norm = std::move(data);
        break;
      case WeightRole::kIndexQ:
        L->index_q = std::move(data);
        break;
      case WeightRole::kIndexK:
        L->index_k = std::move(data);
        break;
      case WeightRole::kIndexQNorm:
        L->index_q_norm = std::move(data);
        break;
      case WeightRole::kIndexKNorm:
        L->index_k_norm = std::move(data);
        break;
      case WeightRole::kMlpGate:
        L->mlp_gate = std::move(data);
        break;
      case WeightRole::kMlpUp:
        L->mlp_up = std::move(data);
        break;
      case WeightRole::kMlpDown:
        L->mlp_down = std::move(data);
        break;
      case WeightRole::kRouter:
        place_router_rows(c, data.data(), c.hidden_size);
        L->router = std::move(data);
        break;
      case WeightRole::kRouterBias:
        place_router_rows(c, data.data(), 1);
        L->router_bias = std::move(data);
        break;
      case WeightRole::kExpertGate:
        L->expert_gate[s.expert] = std::move(data);
        break;
      case WeightRole::kExpertDown:
        L->expert_down[s.expert] = std::move(data);
        break;
      case WeightRole::kExpertUp:
        L->expert_up[s.expert] = std::move(data);
        break;
      case WeightRole::kSharedGate:
        L->shared_gate = std::move(data);
        break;
      case WeightRole::kSharedUp:
        L->shared_up = std::move(data);
        break;
      case WeightRole::kSharedDown:
        L->shared_down = std::move(data);
        break;
    }
  }
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
    w.bytes += w.lm_head.size() * sizeof(float);
  }
  for (auto& layer : w.layers)
    if (layer.router_bias.empty() && !layer.router.empty()) layer.router_bias.assign(c.num_experts, 0.0f);
  log_info(
      "loaded ", specs.size(), " tensors from ", ckpt.num_files(), " file(s) in ", ckpt.dir(),
      ckpt.num_ignored() ? " (" + std::to_string(ckpt.num_ignored()) + " MTP tensors skipped)" : "");
  return w;
}

}  // namespace m3
