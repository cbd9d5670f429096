// config.json parsing: the released spelling, transformers' spelling and text-only files give the same
// ModelConfig; every unsupported or inconsistent value is an error naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/model_config.h"

namespace m3 {
namespace {

using nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in("tests/fixtures/models/" + name + "/config.json");
  return json::parse(in);
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReleasedSpelling) {
  ModelConfig c = load_model_config("tests/fixtures/models/m3-tiny-msa");
  EXPECT_TRUE(c.vl_wrapper);
  EXPECT_EQ(c.architecture, "MiniMaxM3SparseForConditionalGeneration");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rotary_dim, 16);
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.sparse_attention, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.msa.block_size, 8);
  EXPECT_EQ(c.msa.topk_blocks, 4);
  EXPECT_EQ(c.msa.local_blocks, 1);
  EXPECT_EQ(c.msa.init_blocks, 0);
  EXPECT_EQ(c.msa.num_index_heads, 4);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.experts_per_token, 2);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.0f);
  EXPECT_FLOAT_EQ(c.swiglu_alpha, 1.702f);
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_EQ(c.weight_quant, WeightQuant::kNone);
}

TEST(ModelConfig, TransformersSpelling) {
  // save_pretrained writes layer_types / mlp_layer_types / rope_parameters / index_* and hidden_act "silu".
  ModelConfig c = load_model_config("tests/fixtures/models/m3-tiny-hf-sharded");
  EXPECT_EQ(c.sparse_attention, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(c.moe, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(c.msa.block_size, 16);
  EXPECT_EQ(c.msa.topk_blocks, 3);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rotary_dim, 16);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.shared_intermediate_size, 48);
}

TEST(ModelConfig, TextOnlyAndMxfp8) {
  ModelConfig t = load_model_config("tests/fixtures/models/m3-tiny-text-sharded");
  EXPECT_FALSE(t.vl_wrapper);
  EXPECT_EQ(t.architecture, "MiniMaxM3SparseForCausalLM");
  ModelConfig q = load_model_config("tests/fixtures/models/m3-tiny-mxfp8");
  EXPECT_EQ(q.weight_quant, WeightQuant::kMxfp8);
  EXPECT_EQ(q.quant_block, 32);
}

TEST(ModelConfig, RealM3Values) {
  // The released text_config (spec §1.3), abridged to what the parser reads.
  json t = {{"hidden_size", 6144},
            {"num_hidden_layers", 60},
            {"num_attention_heads", 64},
            {"num_key_value_heads", 4},
            {"head_dim", 128},
            {"vocab_size", 200064},
            {"max_position_embeddings", 1048576},
            {"rms_norm_eps", 1e-6},
            {"use_gemma_norm", true},
            {"rope_theta", 5000000},
            {"rotary_dim", 64},
            {"partial_rotary_factor", 0.5},
            {"hidden_act", "swigluoai"},
            {"dense_intermediate_size", 12288},
            {"intermediate_size", 3072},
            {"shared_intermediate_size", 3072},
            {"num_local_experts", 128},
            {"num_experts_per_tok", 4},
            {"n_shared_experts", 1},
            {"routed_scaling_factor", 2.0},
            {"swiglu_alpha", 1.702},
            {"swiglu_limit", 7.0}};
  std::vector<int> freq(60, 1);
  freq[0] = freq[1] = freq[2] = 0;
  t["moe_layer_freq"] = freq;
  t["sparse_attention_config"] = {
      {"use_sparse_attention", true}, {"sparse_attention_freq", freq}, {"sparse_disable_index_value", freq},
      {"sparse_index_dim", 128},      {"sparse_num_index_heads", 4},   {"sparse_topk_blocks", 16},
      {"sparse_block_size", 128},     {"sparse_score_type", "max"},    {"sparse_init_block", 0},
      {"sparse_local_block", 1}};
  ModelConfig c = parse_model_config(
      {{"architectures", {"MiniMaxM3SparseForConditionalGeneration"}}, {"text_config", t}}, "config.json");
  EXPECT_EQ(c.num_dense_attention_layers(), 3);
  EXPECT_EQ(c.group_size(), 16);
  EXPECT_EQ(c.q_size(), 8192);
  EXPECT_EQ(c.msa.block_size, 128);
  EXPECT_EQ(c.msa.topk_blocks, 16);
}

struct BadCase {
  const char* what;
  std::function<void(json&)> edit;
  const char* expect;  // substring of the error
};

TEST(ModelConfig, InvalidValuesAreNamed) {
  const BadCase cases[] = {
      {"activation", [](json& t) { t["hidden_act"] = "gelu"; }, "hidden_act"},
      {"silu in released spelling", [](json& t) { t["hidden_act"] = "silu"; }, "hidden_act"},
      {"index heads", [](json& t) { t["sparse_attention_config"]["sparse_num_index_heads"] = 2; },
       "index_n_heads"},
      {"top-k < local",
       [](json& t) {
         t["sparse_attention_config"]["sparse_topk_blocks"] = 1;
         t["sparse_attention_config"]["sparse_local_block"] = 2;
       },
       "sparse_topk_blocks"},
      {"score type", [](json& t) { t["sparse_attention_config"]["sparse_score_type"] = "mean"; },
       "sparse_score_type"},
      {"index value",
       [](json& t) {
         t["sparse_attention_config"]["sparse_disable_index_value"] = {0, 0, 0, 0};
       },
       "sparse_disable_index_value"},
      {"freq length",
       [](json& t) {
         t["moe_layer_freq"] = {0, 1};
       },
       "moe_layer_freq"},
      {"missing hidden", [](json& t) { t.erase("hidden_size"); }, "hidden_size is missing"},
      {"negative", [](json& t) { t["num_attention_heads"] = -8; }, "num_attention_heads"},
      {"heads not multiple", [](json& t) { t["num_key_value_heads"] = 3; }, "num_attention_heads"},
      {"rotary odd",
       [](json& t) {
         t["rotary_dim"] = 15;
         t.erase("partial_rotary_factor");
       },
       "rotary_dim"},
      {"rotary contradicts", [](json& t) { t["rotary_dim"] = 8; }, "rotary_dim"},
      {"rope scaling",
       [](json& t) {
         t["rope_scaling"] = {{"type", "yarn"}};
       },
       "rope_scaling"},
      {"scoring", [](json& t) { t["scoring_func"] = "softmax"; }, "scoring_func"},
      {"gemma", [](json& t) { t["use_gemma_norm"] = false; }, "use_gemma_norm"},
      {"gate", [](json& t) { t["attention_output_gate"] = true; }, "attention_output_gate"},
      {"top experts", [](json& t) { t["num_experts_per_tok"] = 9; }, "num_experts_per_tok"},
      {"qk norm", [](json& t) { t["qk_norm_type"] = "per_layer"; }, "qk_norm_type"},
      {"type", [](json& t) { t["hidden_size"] = "64"; }, "hidden_size must be an integer"},
  };
  for (const BadCase& c : cases) {
    json j = fixture("m3-tiny-msa");
    c.edit(j["text_config"]);
    std::string err = error_of(j);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got '" << err << "'";
    EXPECT_NE(err.find("config.json"), std::string::npos) << "errors name the file";
  }
}

TEST(ModelConfig, ContradictingSpellingsAreRejected) {
  json j = fixture("m3-tiny-msa");
  j["text_config"]["layer_types"] = {"full_attention", "full_attention", "minimax_m3_sparse",
                                     "minimax_m3_sparse"};
  EXPECT_NE(error_of(j).find("layer_types"), std::string::npos);
  json q = fixture("m3-tiny-msa");
  q["quantization_config"] = {{"quant_method", "gptq"}};
  EXPECT_NE(error_of(q).find("quant_method"), std::string::npos);
}

TEST(ModelConfig, MissingOrBrokenFile) {
  EXPECT_THROW(load_model_config("tests/fixtures/does-not-exist"), Error);
  EXPECT_NE(error_of(json::array()).find("not a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace m3
