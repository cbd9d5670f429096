// `m3 serve` configuration: the flags of vLLM, SGLang and trtllm-serve as the deployment guides spell them,
// plus TensorRT-LLM's --extra_llm_api_options YAML. Everything is validated before the model loads; a value
// this build cannot honour (a block size other than the model's, a TP size the heads do not split into) is
// an error naming the flag. Backend-choice flags of the peers (attention/MoE
// backends) are accepted and logged.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "config/model_config.h"
#include "dist/launch.h"
#include "engine/engine.h"
#include "server/api_server.h"

namespace m3 {

struct ServeConfig {
  std::string model;      // positional MODEL, --model or --model-path
  std::string model_dir;  // resolved local directory
  std::string device = "auto";
  ServerOptions server;
  EngineOptions engine;
  int tensor_parallel = 1, data_parallel = 1, expert_parallel = 1;
  dist::LaunchFlags launch;  // world_size = tensor_parallel x data_parallel after finalize
  bool enable_expert_parallel = false;
  bool enable_attention_dp = false;       // SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp
  std::string expert_placement_file;      // --expert-placement (SGLang --init-expert-location)
  std::vector<int32_t> expert_placement;  // its balanced placement, after finalize
  int block_size = 0;                     // 0: the model's
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_dtype = "auto";
  std::string dtype = "auto";
  std::string quantization;
  std::string reasoning_parser, tool_parser, chat_template;  // parsers: "" = the model family's default
  std::optional<bool> auto_tool_choice;                      // unset: on when the tool parser is
  std::string extra_options_yaml;
  int num_kv_pages = 0;
  double kv_cache_gb = 4.0;
  // The prefix cache's host tier (--kv-offloading-size GiB, --hicache-size GB, host_cache_size bytes): 0
  // none.
  double kv_offloading_bytes = 0;
  bool enable_hierarchical_cache = false;
  bool enforce_eager = false;        // cuda: no CUDA graphs for decode steps
  std::string load_format = "auto";  // auto | safetensors | dummy (random weights on the device)
  size_t max_pending = 4096;
  bool disable_log_stats = false;
  double log_stats_interval_s = 10;  // the engine statistics line, as vLLM's
  std::string
      scripted_responses;  // testing: --scripted-responses FILE replaces the model (device "scripted")
  std::vector<std::string> ignored_flags;  // accepted peer flags with no effect here
};

// Adds every serve flag to `cmd`, writing into `cfg`.
void add_serve_flags(CLI::App& cmd, ServeConfig& cfg);

// Resolves MODEL (a directory, or a Hugging Face id found in the local HF cache), merges the YAML file and
// checks every flag against the model config. Throws m3::Error naming the flag / file.
void finalize_serve_config(ServeConfig& cfg, const ModelConfig& model);
std::string resolve_model_dir(const std::string& model);

}  // namespace m3
