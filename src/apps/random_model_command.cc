// Weights come from a counter-based generator (value = f(seed, tensor name, element index)), so the output is
// the same whatever the chunking or thread count. Scales keep activations O(1): linear weights ~ N(0, 1/in),
// Gemma norm offsets ~ N(0, 0.1^2), routing bias ~ N(0, 0.1^2).
#include "apps/random_model_command.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "config/model_config.h"
#include "loader/safetensors_writer.h"
#include "model/weight_layout.h"

namespace m3 {
namespace {
namespace fs = std::filesystem;

struct RandomModelArgs {
  std::string out, preset = "m3", layers, tokenizer_from;
  uint64_t seed = 0;
  double shard_gb = 5.0;
};

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately N(0, 1): the sum of four uniforms, rescaled (Irwin-Hall).
float gaussian(uint64_t key) {
  uint64_t a = splitmix(key), b = splitmix(a);
  float s = static_cast<float>(a & 0xffffffff) + static_cast<float>(a >> 32) +
            static_cast<float>(b & 0xffffffff) + static_cast<float>(b >> 32);
  return (s / 4294967296.0f - 2.0f) * 1.7320508f;
}

ModelConfig preset(const RandomModelArgs& a) {
  ModelConfig c;
  int dense = 3, sparse = 57;
  if (a.preset == "m3") {
    c.hidden_size = 6144, c.num_heads = 64, c.num_kv_heads = 4, c.head_dim = 128, c.rotary_dim = 64;
    c.dense_intermediate_size = 12288, c.expert_intermediate_size = 3072, c.shared_intermediate_size = 3072;
    c.num_experts = 128, c.experts_per_token = 4;
    c.msa.index_head_dim = 128;
  } else if (a.preset == "tiny") {
    dense = 1, sparse = 3;
    c.hidden_size = 64, c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 32, c.rotary_dim = 16;
    c.dense_intermediate_size = 128, c.expert_intermediate_size = 32, c.shared_intermediate_size = 32;
    c.num_experts = 8, c.experts_per_token = 2;
    c.msa.index_head_dim = 32;
  } else {
    fail(ErrorKind::kInvalidArgument, "--preset '" + a.preset + "' is not one of m3, tiny");
  }
  if (!a.layers.empty()) {
    auto plus = a.layers.find('+');
    try {
      if (plus == std::string::npos) throw std::invalid_argument("no +");
      dense = std::stoi(a.layers.substr(0, plus));
      sparse = std::stoi(a.layers.substr(plus + 1));
    } catch (const std::exception&) {
      fail(ErrorKind::kInvalidArgument, "--layers '" + a.layers + "' must be DENSE+SPARSE, e.g. 3+5");
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
  return c;
}

float scale_for(const WeightSpec& s) {
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

int run(const RandomModelArgs& a) {
  ModelConfig c = preset(a);
  fs::create_directories(a.out);
  {
    std::ofstream f(fs::path(a.out) / "config.json");
    f << released_config_json(c).dump(2) << "\n";
  }
  if (!a.tokenizer_from.empty())
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                             "generation_config.json", "LICENSE"}) {
      fs::path src = fs::path(a.tokenizer_from) / name;
      if (fs::exists(src)) fs::copy_file(src, fs::path(a.out) / name, fs::copy_options::overwrite_existing);
    }

  const std::vector<WeightSpec> specs = weight_layout(c);
  const uint64_t shard_bytes = static_cast<uint64_t>(a.shard_gb * 1e9);
  std::vector<SafetensorsWriter> shards(1);
  for (const WeightSpec& s : specs) {
    const bool fp32 = s.role == WeightRole::kRouter || s.role == WeightRole::kRouterBias;
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    const uint64_t bytes = static_cast<uint64_t>(n) * (fp32 ? 4 : 2);
    if (shards.back().size() > 0 && shards.back().data_bytes() + bytes > shard_bytes) shards.emplace_back();
    const std::string name = "language_model." + s.names[0];  // the release's VL-wrapper prefix
    const uint64_t key = splitmix(a.seed ^ std::hash<std::string>{}(s.names[0]));
    const float scale = scale_for(s);
    shards.back().add(name, fp32 ? DType::kF32 : DType::kBF16, s.shape,
                      [key, scale, fp32](uint8_t* dst, int64_t first, int64_t count) {
#pragma omp parallel for schedule(static)
                        for (int64_t i = 0; i < count; ++i) {
                          float v = gaussian(key + static_cast<uint64_t>(first + i)) * scale;
                          if (fp32)
                            reinterpret_cast<float*>(dst)[i] = v;
                          else
                            reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
                        }
                      });
  }
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1
                                 ? "model.safetensors"
                                 : "model-" + std::string(5 - std::to_string(i + 1).size(), '0') +
                                       std::to_string(i + 1) + "-of-" +
                                       std::string(5 - std::to_string(shards.size()).size(), '0') +
                                       std::to_string(shards.size()) + ".safetensors";
    log_info("writing ", file, " (", shards[i].size(), " tensors, ", shards[i].data_bytes() / 1e9, " GB) [",
             i + 1, "/", shards.size(), "]");
    shards[i].write((fs::path(a.out) / file).string());
    for (const auto& n : shards[i].names()) weight_map[n] = file;
    total += shards[i].data_bytes();
  }
  if (shards.size() > 1) {
    std::ofstream f(fs::path(a.out) / "model.safetensors.index.json");
    f << nlohmann::json({{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}).dump(2) << "\n";
  }
  log_info("wrote a random ", a.preset, " model (", c.num_layers, " layers, ", total / 1e9, " GB) to ",
           a.out);
  return 0;
}

}  // namespace

void register_random_model_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RandomModelArgs>();
  CLI::App* cmd =
      app.add_subcommand("make-random-model", "Write a random-weight checkpoint in the released format");
  cmd->add_option("--out", args->out, "Output directory")->required();
  cmd->add_option("--preset", args->preset, "m3 (real widths) | tiny");
  cmd->add_option("--layers", args->layers,
                  "DENSE+SPARSE layer counts, e.g. 3+5 (default: 3+57 for m3, 1+3 for tiny)");
  cmd->add_option(
      "--tokenizer-from", args->tokenizer_from,
      "Copy tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json from DIR");
  cmd->add_option("--seed", args->seed, "Random seed");
  cmd->add_option("--shard-gb", args->shard_gb, "Largest shard size");
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace m3
