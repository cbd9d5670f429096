// Parsing and validation of config.json into ModelConfig. Field resolution order: the transformers spelling
// wins when present (it is what the in-tree model reads), the released legacy spelling fills the rest, and
// the two are cross-checked when both are present so a contradictory file fails at startup.
#include "config/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& at(const char* key) const { return obj_.at(key); }

  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    fail(ErrorKind::kInvalidArgument, source_ + ": " + prefix_ + key + " " + why);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const {
    fail(ErrorKind::kUnsupported, source_ + ": " + prefix_ + key + " " + why);
  }

  int64_t integer(const char* key) const {
    if (!has(key)) bad(key, "is missing");
    return integer_value(key, at(key));
  }
  int64_t integer(const char* key, int64_t dflt) const {
    return has(key) ? integer_value(key, at(key)) : dflt;
  }
  int positive(const char* key) const {
    int64_t v = integer(key);
    if (v <= 0 || v > (1 << 30)) bad(key, "must be a positive integer, got " + std::to_string(v));
    return static_cast<int>(v);
  }
  int positive(const char* key, int dflt) const { return has(key) ? positive(key) : dflt; }
  double number(const char* key, double dflt) const {
    if (!has(key)) return dflt;
    if (!at(key).is_number()) bad(key, "must be a number");
    double v = at(key).get<double>();
    if (!std::isfinite(v)) bad(key, "must be finite");
    return v;
  }
  bool boolean(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    const json& v = at(key);
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1))
      return v.get<int64_t>() == 1;
    bad(key, "must be a boolean");
  }
  std::string string(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    if (!at(key).is_string()) bad(key, "must be a string");
    return at(key).get<std::string>();
  }
  // A per-layer 0/1 list of exactly n entries.
  std::vector<bool> flags(const char* key, int n) const {
    const json& v = at(key);
    if (!v.is_array() || static_cast<int>(v.size()) != n)
      bad(key, "must be a list of " + std::to_string(n) + " entries (one per layer)");
    std::vector<bool> out;
    for (const json& e : v) {
      if (e.is_boolean())
        out.push_back(e.get<bool>());
      else if (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1))
        out.push_back(e.get<int64_t>() == 1);
      else
        bad(key, "entries must be 0 or 1");
    }
    return out;
  }
  // A per-layer list of strings mapped through `choices` (string -> bool).
  std::vector<bool> kinds(const char* key, int n, const char* yes, const char* no) const {
    const json& v = at(key);
    if (!v.is_array() || static_cast<int>(v.size()) != n)
      bad(key, "must be a list of " + std::to_string(n) + " entries (one per layer)");
    std::vector<bool> out;
    for (const json& e : v) {
      std::string s = e.is_string() ? e.get<std::string>() : e.dump();
      if (s == yes)
        out.push_back(true);
      else if (s == no)
        out.push_back(false);
      else
        unsupported(key, "entry '" + s + "' is not supported (expected '" + yes + "' or '" + no + "')");
    }
    return out;
  }
  Reader child(const char* key) const {
    if (!at(key).is_object()) bad(key, "must be an object");
    return Reader(at(key), source_, prefix_ + key + ".");
  }

 private:
  int64_t integer_value(const char* key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    bad(key, "must be an integer");
  }
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

void parse_attention_layout(const Reader& t, ModelConfig& c) {
  const int n = c.num_layers;
  // MSA block parameters: transformers' flat index_* fields, else the released sparse_attention_config.
  bool have_legacy = t.has("sparse_attention_config");
  std::vector<bool> legacy_sparse;
  if (have_legacy) {
    Reader s = t.child("sparse_attention_config");
    bool use_sparse = s.boolean("use_sparse_attention", true);
    legacy_sparse = (use_sparse && s.has("sparse_attention_freq")) ? s.flags("sparse_attention_freq", n)
                                                                   : std::vector<bool>(n, false);
    if (use_sparse && !s.has("sparse_attention_freq")) s.bad("sparse_attention_freq", "is missing");
    c.msa.block_size = s.positive("sparse_block_size", c.msa.block_size);
    c.msa.topk_blocks = s.positive("sparse_topk_blocks", c.msa.topk_blocks);
    c.msa.local_blocks = static_cast<int>(s.integer("sparse_local_block", c.msa.local_blocks));
    c.msa.init_blocks = static_cast<int>(s.integer("sparse_init_block", c.msa.init_blocks));
    c.msa.num_index_heads = s.positive("sparse_num_index_heads", c.msa.num_index_heads);
    c.msa.index_head_dim = s.positive("sparse_index_dim", c.msa.index_head_dim);
    std::string score = s.string("sparse_score_type", "max");
    if (score != "max") s.unsupported("sparse_score_type", "'" + score + "' is not supported (only 'max')");
    if (s.has("sparse_disable_index_value")) {
      std::vector<bool> disabled = s.flags("sparse_disable_index_value", n);
      for (int i = 0; i < n; ++i)
        if (legacy_sparse[i] && !disabled[i])
          s.unsupported("sparse_disable_index_value", "is 0 for sparse layer " + std::to_string(i) +
                                                          ": the index value branch is not supported");
    }
  }
  c.msa.block_size = t.positive("index_block_size", c.msa.block_size);
  c.msa.topk_blocks = t.positive("index_topk_blocks", c.msa.topk_blocks);
  c.msa.local_blocks = static_cast<int>(t.integer("index_local_blocks", c.msa.local_blocks));
  c.msa.num_index_heads = t.positive("index_n_heads", c.msa.num_index_heads);
  c.msa.index_head_dim = t.positive("index_head_dim", c.msa.index_head_dim);

  if (t.has("layer_types")) {
    c.sparse_attention = t.kinds("layer_types", n, "minimax_m3_sparse", "full_attention");
    if (have_legacy && legacy_sparse != c.sparse_attention)
      t.bad("layer_types", "contradicts sparse_attention_config.sparse_attention_freq");
  } else {
    c.sparse_attention = have_legacy ? legacy_sparse : std::vector<bool>(n, false);
  }

  if (t.has("mlp_layer_types")) {
    c.moe = t.kinds("mlp_layer_types", n, "sparse", "dense");
    if (t.has("moe_layer_freq") && t.flags("moe_layer_freq", n) != c.moe)
      t.bad("mlp_layer_types", "contradicts moe_layer_freq");
  } else if (t.has("moe_layer_freq")) {
    c.moe = t.flags("moe_layer_freq", n);
  } else {
    c.moe = std::vector<bool>(n, true);  // transformers' default: every layer MoE
  }
}

void parse_rope(const Reader& t, ModelConfig& c) {
  double theta = t.number("rope_theta", 0);
  double factor = t.number("partial_rotary_factor", 0);
  if (t.has("rope_scaling")) t.unsupported("rope_scaling", "is not supported (MiniMax-M3 uses plain RoPE)");
  if (t.has("rope_parameters")) {
    Reader r = t.child("rope_parameters");
    std::string type = r.string("rope_type", r.string("type", "default"));
    if (type != "default") r.unsupported("rope_type", "'" + type + "' is not supported (only 'default')");
    double theta2 = r.number("rope_theta", 0);
    if (theta != 0 && theta2 != 0 && theta != theta2)
      t.bad("rope_theta", "contradicts rope_parameters.rope_theta");
    if (theta2 != 0) theta = theta2;
    double f2 = r.number("partial_rotary_factor", 0);
    if (factor != 0 && f2 != 0 && factor != f2)
      t.bad("partial_rotary_factor", "contradicts rope_parameters.partial_rotary_factor");
    if (f2 != 0) factor = f2;
  }
  if (theta <= 0) t.bad("rope_theta", "is missing or not positive");
  c.rope_theta = theta;
  int from_factor = factor > 0 ? static_cast<int>(std::lround(c.head_dim * factor)) : 0;
  c.rotary_dim = static_cast<int>(t.integer("rotary_dim", from_factor > 0 ? from_factor : c.head_dim));
  if (from_factor > 0 && t.has("rotary_dim") && from_factor != c.rotary_dim)
    t.bad("rotary_dim", "(" + std::to_string(c.rotary_dim) +
                            ") contradicts partial_rotary_factor x head_dim (" + std::to_string(from_factor) +
                            ")");
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim)
    t.bad("rotary_dim", "must be even and in (0, head_dim]");
}

void parse_activation(const Reader& t, ModelConfig& c) {
  std::string act = t.string("hidden_act", "swigluoai");
  // transformers rewrites "swigluoai" to "silu" when it saves (the gate is computed inline from swiglu_alpha
  // / swiglu_limit); only in its spelling (layer_types present) does "silu" still mean SwiGLU-OAI.
  bool transformers_spelling = t.has("layer_types") || t.has("mlp_layer_types");
  if (!(act == "swigluoai" || (act == "silu" && transformers_spelling)))
    t.unsupported("hidden_act", "'" + act + "' is not supported (MiniMax-M3 uses swigluoai)");
  c.swiglu_alpha = static_cast<float>(t.number("swiglu_alpha", 1.702));
  c.swiglu_limit = static_cast<float>(t.number("swiglu_limit", 7.0));
  if (t.has("swiglu_beta") && t.number("swiglu_beta", 1.0) != 1.0)
    t.unsupported("swiglu_beta", "must be 1.0");
  if (c.swiglu_limit <= 0) t.bad("swiglu_limit", "must be positive");
}

void check_model_invariants(const Reader& t, ModelConfig& c) {
  if (!t.boolean("use_gemma_norm", true)) t.unsupported("use_gemma_norm", "= false is not supported");
  if (t.boolean("attention_output_gate", false))
    t.unsupported("attention_output_gate", "= true is not supported");
  if (!t.boolean("use_qk_norm", true)) t.unsupported("use_qk_norm", "= false is not supported");
  std::string qk = t.string("qk_norm_type", "per_head");
  if (qk != "per_head") t.unsupported("qk_norm_type", "'" + qk + "' is not supported (only 'per_head')");
  std::string scoring = t.string("scoring_func", "sigmoid");
  if (scoring != "sigmoid")
    t.unsupported("scoring_func", "'" + scoring + "' is not supported (only 'sigmoid')");
  if (t.integer("n_shared_experts", 1) != 1) t.unsupported("n_shared_experts", "must be 1");

  if (c.num_heads % c.num_kv_heads != 0)
    t.bad("num_attention_heads", "must be a multiple of num_key_value_heads");
  if (c.num_experts > 0 && (c.experts_per_token <= 0 || c.experts_per_token > c.num_experts))
    t.bad("num_experts_per_tok", "must be in [1, num_local_experts]");
  if (c.any_sparse()) {
    const MsaConfig& m = c.msa;
    if (m.num_index_heads != c.num_kv_heads)
      t.unsupported("index_n_heads",
                    "(" + std::to_string(m.num_index_heads) + ") must equal num_key_value_heads (" +
                        std::to_string(c.num_kv_heads) + "): index head g selects blocks for KV group g");
    if (m.local_blocks < 1)
      t.bad("sparse_local_block", "must be >= 1 (the query's own block is always attended)");
    if (m.init_blocks < 0) t.bad("sparse_init_block", "must be >= 0");
    if (m.topk_blocks < m.local_blocks + m.init_blocks)
      t.bad("sparse_topk_blocks", "(" + std::to_string(m.topk_blocks) +
                                      ") is smaller than the forced local + init blocks (" +
                                      std::to_string(m.local_blocks + m.init_blocks) + ")");
    if (m.index_head_dim < c.rotary_dim)
      t.bad("index_head_dim", "must be >= rotary_dim: RoPE is applied to the index branch too");
  }
  bool any_moe = false, any_dense = false;
  for (int i = 0; i < c.num_layers; ++i) (c.moe[i] ? any_moe : any_dense) = true;
  if (any_moe && (c.num_experts <= 0 || c.expert_intermediate_size <= 0 || c.shared_intermediate_size <= 0))
    t.bad("num_local_experts", "and the expert sizes must be positive when MoE layers exist");
  if (any_dense && c.dense_intermediate_size <= 0) t.bad("dense_intermediate_size", "must be positive");
}

void parse_special_ids(const Reader& t, ModelConfig& c) {
  c.bos_token_id = static_cast<int>(t.integer("bos_token_id", -1));
  if (t.has("eos_token_id")) {
    const json& e = t.at("eos_token_id");
    if (e.is_array()) {
      for (const json& x : e) c.eos_token_ids.push_back(x.get<int>());
    } else {
      c.eos_token_ids.push_back(static_cast<int>(t.integer("eos_token_id")));
    }
  }
}

void parse_quantization(const Reader& top, ModelConfig& c) {
  if (!top.has("quantization_config")) return;
  Reader q = top.child("quantization_config");
  std::string method = q.string("quant_method", "");
  if (method != "mxfp8")
    q.unsupported("quant_method",
                  "'" + method + "' is not supported (supported: mxfp8, or an unquantized bf16 checkpoint)");
  if (q.has("weight_block_size")) {
    const json& b = q.at("weight_block_size");
    if (!b.is_array() || b.size() != 2 || b[0] != 1 || !b[1].is_number_integer() || b[1].get<int>() <= 0)
      q.unsupported("weight_block_size", "must be [1, N] (per-row blocks of N inputs)");
    c.quant_block = b[1].get<int>();
  }
  c.weight_quant = WeightQuant::kMxfp8;
}

void parse_vision(const Reader& top, ModelConfig& c) {
  if (!top.has("vision_config")) return;
  const Reader v = top.child("vision_config");
  VisionConfig& x = c.vision;
  x.hidden_size = v.positive("hidden_size", x.hidden_size);
  x.intermediate_size = v.positive("intermediate_size", x.intermediate_size);
  x.num_layers = v.positive("num_hidden_layers", x.num_layers);
  x.num_heads = v.positive("num_attention_heads", x.num_heads);
  x.num_channels = v.positive("num_channels", x.num_channels);
  x.patch_size = v.positive("patch_size", x.patch_size);
  x.layer_norm_eps = static_cast<float>(v.number("layer_norm_eps", x.layer_norm_eps));
  x.rope_theta = v.number("rope_theta", x.rope_theta);
  if (v.has("rope_parameters") && v.at("rope_parameters").is_object())
    x.rope_theta = v.child("rope_parameters").number("rope_theta", x.rope_theta);
  x.segment_max_frames = v.positive("vision_segment_max_frames", x.segment_max_frames);
  // The merge and temporal sizes: img_token_compression_config (released, at the top and in vision_config) or
  // transformers' flat spelling.
  for (const Reader* r : {&top, &v})
    if (r->has("img_token_compression_config")) {
      Reader m = r->child("img_token_compression_config");
      x.spatial_merge_size = m.positive("spatial_merge_size", x.spatial_merge_size);
      x.temporal_patch_size = m.positive("temporal_patch_size", x.temporal_patch_size);
      const std::string method = m.string("image_token_compression_method", "patch_merge");
      if (method != "patch_merge")
        m.unsupported("image_token_compression_method",
                      "'" + method + "' is not supported (only patch_merge)");
    }
  x.spatial_merge_size = v.positive("spatial_merge_size", x.spatial_merge_size);
  x.temporal_patch_size = v.positive("temporal_patch_size", x.temporal_patch_size);
  const std::string act = v.string("hidden_act", "gelu");
  if (act != "gelu")
    v.unsupported("hidden_act", "'" + act + "' is not supported (the vision tower uses gelu)");
  if (x.hidden_size % x.num_heads != 0) v.bad("hidden_size", "must be a multiple of num_attention_heads");
  if (x.rope_axis_dim() < 2) v.bad("hidden_size", "gives heads too narrow for the 3D RoPE");
  x.projector_hidden_size = top.positive("projector_hidden_size", c.hidden_size);
  const std::string pact = top.string("projector_hidden_act", "gelu");
  if (pact != "gelu") top.unsupported("projector_hidden_act", "'" + pact + "' is not supported (only gelu)");
  x.image_token_id =
      static_cast<int>(top.integer("image_token_index", top.integer("image_token_id", 200025)));
  x.video_token_id =
      static_cast<int>(top.integer("video_token_index", top.integer("video_token_id", 200026)));
  c.has_vision = true;
}

}  // namespace

bool ModelConfig::any_sparse() const {
  for (bool s : sparse_attention)
    if (s) return true;
  return false;
}

int ModelConfig::num_dense_attention_layers() const {
  int n = 0;
  for (bool s : sparse_attention) n += s ? 0 : 1;
  return n;
}

ModelConfig parse_model_config(const json& config, const std::string& source) {
  if (!config.is_object()) fail(ErrorKind::kCorruptData, source + ": not a JSON object");
  Reader top(config, source, "");
  ModelConfig c;
  c.vl_wrapper = top.has("text_config");
  Reader t = c.vl_wrapper ? top.child("text_config") : top;
  if (top.has("architectures") && top.at("architectures").is_array() && !top.at("architectures").empty())
    c.architecture = top.at("architectures")[0].get<std::string>();

  c.hidden_size = t.positive("hidden_size");
  c.num_layers = t.positive("num_hidden_layers");
  c.num_heads = t.positive("num_attention_heads");
  c.num_kv_heads = t.positive("num_key_value_heads", c.num_heads);
  c.head_dim = t.positive("head_dim", c.hidden_size / c.num_heads);
  c.vocab_size = t.positive("vocab_size");
  c.max_position_embeddings = t.integer("max_position_embeddings", 1 << 20);
  if (c.max_position_embeddings <= 0) t.bad("max_position_embeddings", "must be positive");
  c.rms_norm_eps = static_cast<float>(t.number("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) t.bad("rms_norm_eps", "must be positive");

  c.dense_intermediate_size = t.has("dense_intermediate_size") ? t.positive("dense_intermediate_size") : 0;
  c.expert_intermediate_size = t.has("intermediate_size") ? t.positive("intermediate_size") : 0;
  c.shared_intermediate_size = t.has("shared_intermediate_size") ? t.positive("shared_intermediate_size") : 0;
  c.num_experts = t.has("num_local_experts") ? t.positive("num_local_experts") : 0;
  c.experts_per_token = t.has("num_experts_per_tok") ? t.positive("num_experts_per_tok") : 0;
  c.routed_scaling_factor = static_cast<float>(t.number("routed_scaling_factor", 1.0));
  c.use_routing_bias = t.boolean("use_routing_bias", true);
  c.tie_word_embeddings = t.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", false));

  parse_attention_layout(t, c);
  parse_rope(t, c);
  parse_activation(t, c);
  check_model_invariants(t, c);
  parse_special_ids(t, c);
  parse_quantization(top, c);
  parse_vision(top, c);
  return c;
}

nlohmann::json released_config_json(const ModelConfig& c) {
  std::vector<int> attn, ffn;
  for (int l = 0; l < c.num_layers; ++l) {
    attn.push_back(c.sparse_attention[l] ? 1 : 0);
    ffn.push_back(c.moe[l] ? 1 : 0);
  }
  json t = {{"architectures", {"MiniMaxM3SparseForCausalLM"}},
            {"hidden_size", c.hidden_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"use_gemma_norm", true},
            {"attention_output_gate", false},
            {"rope_theta", c.rope_theta},
            {"rotary_dim", c.rotary_dim},
            {"partial_rotary_factor", static_cast<double>(c.rotary_dim) / c.head_dim},
            {"hidden_act", "swigluoai"},
            {"use_qk_norm", true},
            {"qk_norm_type", "per_head"},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"dense_intermediate_size", c.dense_intermediate_size},
            {"intermediate_size", c.expert_intermediate_size},
            {"shared_intermediate_size", c.shared_intermediate_size},
            {"num_local_experts", c.num_experts},
            {"num_experts_per_tok", c.experts_per_token},
            {"n_shared_experts", 1},
            {"scoring_func", "sigmoid"},
            {"use_routing_bias", c.use_routing_bias},
            {"routed_scaling_factor", c.routed_scaling_factor},
            {"moe_layer_freq", ffn},
            {"swiglu_alpha", c.swiglu_alpha},
            {"swiglu_limit", c.swiglu_limit},
            {"sparse_attention_config",
             {{"use_sparse_attention", c.any_sparse()},
              {"sparse_attention_freq", attn},
              {"sparse_disable_index_value", attn},
              {"sparse_index_dim", c.msa.index_head_dim},
              {"sparse_num_index_heads", c.msa.num_index_heads},
              {"sparse_topk_blocks", c.msa.topk_blocks},
              {"sparse_block_size", c.msa.block_size},
              {"sparse_score_type", "max"},
              {"sparse_init_block", c.msa.init_blocks},
              {"sparse_local_block", c.msa.local_blocks}}}};
  json top = {{"architectures", {"MiniMaxM3SparseForConditionalGeneration"}},
              {"model_type", "minimax_m3_vl"},
              {"torch_dtype", "bfloat16"},
              {"text_config", t}};
  if (c.has_vision) {
    const VisionConfig& v = c.vision;
    const json compression = {{"image_token_compression_method", "patch_merge"},
                              {"spatial_merge_size", v.spatial_merge_size},
                              {"temporal_patch_size", v.temporal_patch_size}};
    top["image_token_index"] = v.image_token_id;
    top["video_token_index"] = v.video_token_id;
    top["projector_hidden_size"] = v.projector_hidden_size;
    top["projector_hidden_act"] = "gelu";
    top["multimodal_projector_bias"] = true;
    top["vision_feature_layer"] = -1;
    top["vision_feature_select_strategy"] = "full";
    top["img_token_compression_config"] = compression;
    top["vision_config"] = {{"model_type", "clip_vision_model"},
                            {"hidden_size", v.hidden_size},
                            {"intermediate_size", v.intermediate_size},
                            {"num_hidden_layers", v.num_layers},
                            {"num_attention_heads", v.num_heads},
                            {"num_channels", v.num_channels},
                            {"patch_size", v.patch_size},
                            {"image_size", 2016},
                            {"hidden_act", "gelu"},
                            {"layer_norm_eps", v.layer_norm_eps},
                            {"position_embedding_type", "rope"},
                            {"rope_mode", "3d"},
                            {"rope_theta", v.rope_theta},
                            {"vision_segment_max_frames", v.segment_max_frames},
                            {"img_token_compression_config", compression}};
  }
  return top;
}

ModelConfig load_model_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path path = fs::path(model_dir) / "config.json";
  if (!fs::is_directory(model_dir))
    fail(ErrorKind::kNotFound, "model directory '" + model_dir + "' does not exist");
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kNotFound, path.string() + ": cannot open");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::kCorruptData, path.string() + ": not valid JSON");
  ModelConfig c = parse_model_config(j, path.string());

  // generation_config.json holds the eos ids generation stops on; it overrides the config's defaults.
  fs::path gen = fs::path(model_dir) / "generation_config.json";
  if (fs::exists(gen)) {
    std::ifstream gin(gen);
    json g = json::parse(gin, nullptr, false);
    if (g.is_discarded() || !g.is_object())
      fail(ErrorKind::kCorruptData, gen.string() + ": not a JSON object");
    ModelConfig ids;
    parse_special_ids(Reader(g, gen.string(), ""), ids);
    if (!ids.eos_token_ids.empty()) c.eos_token_ids = ids.eos_token_ids;
    if (ids.bos_token_id >= 0) c.bos_token_id = ids.bos_token_id;
  }
  return c;
}

}  // namespace m3
