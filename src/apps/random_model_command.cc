// `m3 make-random-model`: writes a synthetic checkpoint in the released format (model/random_model.h: preset
// configs, scales and counter-based values, so the output is the same whatever the chunking or thread count).
#include "apps/random_model_command.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/random_init.h"
#include "config/model_config.h"
#include "loader/safetensors_writer.h"
#include "model/random_model.h"
#include "model/vision_tower.h"
#include "model/weight_layout.h"

namespace m3 {
namespace {
namespace fs = std::filesystem;

struct RandomModelArgs {
  std::string out, preset = "m3", layers, tokenizer_from;
  uint64_t seed = 0;
  double shard_gb = 5.0;
  bool config_only = false;
  int max_new_tokens = -1;  // -1: 256 for the tiny demo preset, none for m3; 0: none
};

// generation_config.json's max_new_tokens (the server's default max_tokens), merged into the copied file. The
// tiny preset is the bundled demo: its noise should end in seconds when a request sets no max_tokens.
void write_max_new_tokens(const RandomModelArgs& a) {
  const int n = a.max_new_tokens >= 0 ? a.max_new_tokens : a.preset == "tiny" ? 256 : 0;
  if (n == 0) return;
  const fs::path path = fs::path(a.out) / "generation_config.json";
  nlohmann::json g = nlohmann::json::object();
  if (fs::exists(path)) {
    std::ifstream in(path);
    g = nlohmann::json::parse(in, nullptr, false);
    if (!g.is_object()) fail(ErrorKind::kCorruptData, path.string() + ": not a JSON object");
  }
  g["max_new_tokens"] = n;
  std::ofstream(path) << g.dump(2) << "\n";
}

int run(const RandomModelArgs& a) {
  ModelConfig c = random_model_config(a.preset, a.layers);
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
  write_max_new_tokens(a);

  if (a.config_only) {  // for `m3 serve --load-format dummy`: weights generated on the device at load
    log_info("wrote the config (no weights) of a random ", a.preset, " model to ", a.out);
    return 0;
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
    const uint64_t key = random_weight_key(a.seed, s);
    const float scale = random_weight_scale(s);
    shards.back().add(name, fp32 ? DType::kF32 : DType::kBF16, s.shape,
                      [key, scale, fp32](uint8_t* dst, int64_t first, int64_t count) {
#pragma omp parallel for schedule(static)
                        for (int64_t i = 0; i < count; ++i) {
                          float v = counter_gaussian(key + static_cast<uint64_t>(first + i)) * scale;
                          if (fp32)
                            reinterpret_cast<float*>(dst)[i] = v;
                          else
                            reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
                        }
                      });
  }
  // The vision path (model/vision_tower.h): LayerNorms near identity, biases near zero, linears ~1/sqrt(in).
  if (c.has_vision)
    for (const VisionTensor& t : released_vision_tensors(c)) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (shards.back().size() > 0 && shards.back().data_bytes() + uint64_t(n) * 2 > shard_bytes)
        shards.emplace_back();
      const bool norm = t.name.find("norm") != std::string::npos;
      const bool bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
      const float offset = norm && !bias ? 1.0f : 0.0f;
      const float scale = norm || bias ? 0.02f : 1.0f / std::sqrt(float(n / t.shape[0]));
      const uint64_t key = a.seed * 0x9E3779B97F4A7C15ull + std::hash<std::string>{}(t.name);
      shards.back().add(
          t.name, DType::kBF16, t.shape, [key, scale, offset](uint8_t* dst, int64_t first, int64_t count) {
            for (int64_t i = 0; i < count; ++i)
              reinterpret_cast<uint16_t*>(dst)[i] =
                  f32_to_bf16(offset + counter_gaussian(key + static_cast<uint64_t>(first + i)) * scale);
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
  cmd->add_option("--max-new-tokens", args->max_new_tokens,
                  "generation_config.json max_new_tokens, the server's default max_tokens (default: 256 for "
                  "tiny, none for m3; 0: none)");
  cmd->add_option("--shard-gb", args->shard_gb, "Largest shard size");
  cmd->add_flag(
      "--config-only", args->config_only,
      "Write config.json (and the tokenizer files) but no weights: serve it with --load-format dummy");
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace m3
