// Expected tensor list of the MiniMax-M3 text model (spec §2.1) and its reconciliation with a checkpoint.
#include "model/weight_layout.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace m3 {

std::vector<WeightSpec> weight_layout(const ModelConfig& c) {
  std::vector<WeightSpec> s;
  const int64_t H = c.hidden_size, D = c.head_dim;
  s.push_back({WeightRole::kEmbed, -1, -1, {"model.embed_tokens.weight"}, {c.vocab_size, H}});
  if (!c.tie_word_embeddings)
    s.push_back({WeightRole::kLmHead, -1, -1, {"lm_head.weight"}, {c.vocab_size, H}});
  s.push_back({WeightRole::kFinalNorm, -1, -1, {"model.norm.weight"}, {H}});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](WeightRole r, std::vector<std::string> names, std::vector<int64_t> shape,
                   int expert = -1) {
      s.push_back({r, l, expert, std::move(names), std::move(shape)});
    };
    add(WeightRole::kInputNorm, {p + "input_layernorm.weight"}, {H});
    add(WeightRole::kPostNorm, {p + "post_attention_layernorm.weight"}, {H});
    add(WeightRole::kQ, {p + "self_attn.q_proj.weight"}, {c.q_size(), H});
    add(WeightRole::kK, {p + "self_attn.k_proj.weight"}, {c.kv_size(), H});
    add(WeightRole::kV, {p + "self_attn.v_proj.weight"}, {c.kv_size(), H});
    add(WeightRole::kO, {p + "self_attn.o_proj.weight"}, {H, c.q_size()});
    add(WeightRole::kQNorm, {p + "self_attn.q_norm.weight"}, {D});
    add(WeightRole::kKNorm, {p + "self_attn.k_norm.weight"}, {D});
    if (c.sparse_attention[l]) {
      const int64_t Di = c.msa.index_head_dim;
      add(WeightRole::kIndexQ, {p + "self_attn.index_q_proj.weight"}, {c.msa.num_index_heads * Di, H});
      add(WeightRole::kIndexK, {p + "self_attn.index_k_proj.weight"}, {Di, H});
      add(WeightRole::kIndexQNorm, {p + "self_attn.index_q_norm.weight"}, {Di});
      add(WeightRole::kIndexKNorm, {p + "self_attn.index_k_norm.weight"}, {Di});
    }
    if (!c.moe[l]) {
      const int64_t I = c.dense_intermediate_size;
      const std::string alt = p + "block_sparse_moe.";
      add(WeightRole::kMlpGate, {p + "mlp.gate_proj.weight", alt + "gate_proj.weight"}, {I, H});
      add(WeightRole::kMlpUp, {p + "mlp.up_proj.weight", alt + "up_proj.weight"}, {I, H});
      add(WeightRole::kMlpDown, {p + "mlp.down_proj.weight", alt + "down_proj.weight"}, {H, I});
      continue;
    }
    const std::string m = p + "block_sparse_moe.";
    const int64_t I = c.expert_intermediate_size, S = c.shared_intermediate_size;
    add(WeightRole::kRouter, {m + "gate.weight"}, {c.num_experts, H});
    if (c.use_routing_bias) add(WeightRole::kRouterBias, {m + "e_score_correction_bias"}, {c.num_experts});
    for (int e = 0; e < c.num_experts; ++e) {
      const int stored = c.expert_placement.empty() ? e : c.expert_placement[e];  // slot e's expert
      const std::string x = m + "experts." + std::to_string(stored) + ".";
      add(WeightRole::kExpertGate, {x + "w1.weight"}, {I, H}, e);
      add(WeightRole::kExpertDown, {x + "w2.weight"}, {H, I}, e);
      add(WeightRole::kExpertUp, {x + "w3.weight"}, {I, H}, e);
    }
    add(WeightRole::kSharedGate, {m + "shared_experts.gate_proj.weight"}, {S, H});
    add(WeightRole::kSharedUp, {m + "shared_experts.up_proj.weight"}, {S, H});
    add(WeightRole::kSharedDown, {m + "shared_experts.down_proj.weight"}, {H, S});
  }
  return s;
}

bool is_linear(WeightRole role) {
  switch (role) {
    case WeightRole::kQ:
    case WeightRole::kK:
    case WeightRole::kV:
    case WeightRole::kO:
    case WeightRole::kIndexQ:
    case WeightRole::kIndexK:
    case WeightRole::kMlpGate:
    case WeightRole::kMlpUp:
    case WeightRole::kMlpDown:
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp:
    case WeightRole::kExpertDown:
    case WeightRole::kSharedGate:
    case WeightRole::kSharedUp:
    case WeightRole::kSharedDown:
      return true;
    default:
      return false;
  }
}

bool is_routed_expert(WeightRole role) {
  return role == WeightRole::kExpertGate || role == WeightRole::kExpertUp || role == WeightRole::kExpertDown;
}

void place_router_rows(const ModelConfig& c, float* rows, int64_t row_len) {
  if (c.expert_placement.empty()) return;
  const std::vector<float> stored(rows, rows + int64_t(c.num_experts) * row_len);
  for (int s = 0; s < c.num_experts; ++s)
    std::copy_n(stored.data() + int64_t(c.expert_placement[s]) * row_len, row_len,
                rows + int64_t(s) * row_len);
}

void keep_local_experts(const ShardLayout& shard, std::vector<WeightSpec>& specs,
                        std::vector<std::string>* names) {
  size_t kept = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (is_routed_expert(s.role) && (s.expert < shard.experts.begin || s.expert >= shard.experts.end))
      continue;
    if (kept != i) {  // (a self-move would empty the string)
      if (names) (*names)[kept] = std::move((*names)[i]);
      specs[kept] = std::move(specs[i]);
    }
    ++kept;
  }
  specs.resize(kept);
  if (names) names->resize(kept);
}

TensorCut shard_cut(const WeightSpec& spec, const ModelConfig& c, const ShardLayout& shard) {
  if (shard.tp_size == 1) return {};
  const int64_t D = c.head_dim, Di = c.msa.index_head_dim;
  auto rows = [](Slice s, int64_t unit = 1) { return TensorCut{0, s.begin * unit, s.end * unit}; };
  auto cols = [](Slice s, int64_t unit = 1) { return TensorCut{1, s.begin * unit, s.end * unit}; };
  switch (spec.role) {
    case WeightRole::kEmbed:
    case WeightRole::kLmHead:
      return rows(shard.vocab);
    case WeightRole::kQ:
      return rows(shard.q_heads, D);
    case WeightRole::kK:
    case WeightRole::kV:
      return rows(shard.kv_heads, D);
    case WeightRole::kO:
      return cols(shard.q_heads, D);
    case WeightRole::kIndexQ:
      return rows(shard.kv_heads, Di);  // one index query head per KV group
    case WeightRole::kMlpGate:
    case WeightRole::kMlpUp:
      return rows(shard.dense_intermediate);
    case WeightRole::kMlpDown:
      return cols(shard.dense_intermediate);
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp:
      return rows(shard.expert_intermediate);
    case WeightRole::kExpertDown:
      return cols(shard.expert_intermediate);
    case WeightRole::kSharedGate:
    case WeightRole::kSharedUp:
      return rows(shard.shared_intermediate);
    case WeightRole::kSharedDown:
      return cols(shard.shared_intermediate);
    default:
      return {};
  }
}

std::vector<std::string> resolve_weight_names(const Checkpoint& ckpt, const std::vector<WeightSpec>& specs) {
  std::vector<std::string> chosen;
  std::set<std::string> claimed;
  for (const WeightSpec& spec : specs) {
    std::string found;
    for (const std::string& n : spec.names)
      if (ckpt.has(n)) {
        found = n;
        break;
      }
    if (found.empty()) {
      std::string tried = spec.names[0];
      for (size_t i = 1; i < spec.names.size(); ++i) tried += "' or '" + spec.names[i];
      fail(ErrorKind::kCorruptData,
           "checkpoint '" + ckpt.dir() + "' is missing tensor '" + tried + "' " + shape_string(spec.shape));
    }
    claimed.insert(found);
    claimed.insert(found + "_scale_inv");
    chosen.push_back(found);
  }
  for (const std::string& name : ckpt.names())
    if (!claimed.count(name) && name.rfind("vision.", 0) != 0) {  // the vision path checks its own
      const TensorRef& r = ckpt.at(name);
      fail(ErrorKind::kCorruptData, "unexpected tensor '" + r.info->name + "' in " + r.file->path() +
                                        " (not part of this model's config)");
    }
  return chosen;
}

}  // namespace m3
