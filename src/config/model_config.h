// ModelConfig: everything the MiniMax-M3 forward pass depends on, parsed from a Hugging Face config.json.
// Accepts the released spelling (VL wrapper with text_config, sparse_attention_config, moe_layer_freq,
// rope_theta + rotary_dim) and the one transformers writes (layer_types, mlp_layer_types, rope_parameters,
// index_*), and text-only configs. Every value the model math depends on is validated at parse time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3 {

// MiniMax Sparse Attention (MSA) selection parameters, shared by every sparse layer.
struct MsaConfig {
  int block_size = 128;     // KV block = KV page size; blocks are anchored at absolute positions
  int topk_blocks = 16;     // blocks attended per query per KV group, forced blocks included
  int local_blocks = 1;     // the block holding the query (and local_blocks-1 before it) are always kept
  int init_blocks = 0;      // the first init_blocks blocks are always kept ("sink" blocks)
  int num_index_heads = 4;  // == num_kv_heads: index head g selects for KV group g
  int index_head_dim = 128;
};

enum class WeightQuant { kNone, kMxfp8 };

// The vision path (spec/model.md section 4): a CLIP-style ViT with 3D RoPE over (temporal patch, row,
// column), the projector (vision width -> projector_hidden -> text width, GELU) and the patch merger (each 2
// x 2 window of projected patches -> one text-width token). Present when config.json has a vision_config.
struct VisionConfig {
  int hidden_size = 1280;
  int intermediate_size = 5120;
  int num_layers = 32;
  int num_heads = 16;
  int num_channels = 3;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  float layer_norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  int segment_max_frames = 4;          // a video's temporal patches attend in segments of at most this many
  int projector_hidden_size = 6144;    // the projector's and the merger's inner width
  int image_token_id = 200025;         // ]<]image[>[
  int video_token_id = 200026;         // ]<]video[>[
  int vision_start_token_id = 200029;  // ]<]start of image[>[ (videos use it too)
  int vision_end_token_id = 200030;    // ]<]end of image[>[

  int head_dim() const { return hidden_size / num_heads; }
  int patch_dim() const { return num_channels * temporal_patch_size * patch_size * patch_size; }  // 1176
  // Rotated dims per axis (t, h, w): 2 * ((head_dim / 3) / 2) = 26 at head_dim 80, 78 rotated in all.
  int rope_axis_dim() const { return 2 * ((2 * (head_dim() / 2) / 3) / 2); }
};

struct ModelConfig {
  std::string architecture;  // e.g. MiniMaxM3SparseForConditionalGeneration
  bool vl_wrapper = false;   // config.json nests the text model under text_config

  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;

  double rope_theta = 0;
  int rotary_dim = 0;  // leading dims of each head rotated (NeoX rotate-half); the rest pass through

  int dense_intermediate_size = 0;   // MLP width of dense-FFN layers
  int expert_intermediate_size = 0;  // per routed expert
  int shared_intermediate_size = 0;  // shared expert (one per MoE layer)
  int num_experts = 0;
  int experts_per_token = 0;
  float routed_scaling_factor = 1.0f;
  bool use_routing_bias = true;  // e_score_correction_bias, used for expert choice only
  // Set at load, not read from config.json (--expert-placement, config/expert_placement.h): slot s of every
  // MoE layer holds checkpoint expert expert_placement[s]. Empty: slot e is expert e.
  std::vector<int32_t> expert_placement;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;

  std::vector<bool> sparse_attention;  // per layer: MSA (true) or dense causal attention (false)
  std::vector<bool> moe;               // per layer: MoE + shared expert (true) or dense MLP (false)
  MsaConfig msa;

  bool tie_word_embeddings = false;
  WeightQuant weight_quant = WeightQuant::kNone;
  int quant_block = 32;  // MXFP8: one e8m0 scale per quant_block input columns

  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  bool has_vision = false;  // config.json has a vision_config (the weights may still lack the tower)
  VisionConfig vision;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  int group_size() const { return num_heads / num_kv_heads; }
  bool any_sparse() const;
  int num_dense_attention_layers() const;
};

// Parses a config.json object. `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);

// The config.json a released MiniMax-M3 checkpoint would carry for `config` (VL wrapper, legacy spelling).
nlohmann::json released_config_json(const ModelConfig& config);

// Reads DIR/config.json (and DIR/generation_config.json for eos ids when present).
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace m3
