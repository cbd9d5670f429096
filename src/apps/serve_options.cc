// Flag table, YAML merge and cross-checks.
#include "apps/serve_options.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "apps/rank_launch.h"
#include "common/error.h"
#include "common/log.h"
#include "config/expert_placement.h"
#include "config/shard_layout.h"
#include "model/backend.h"

namespace m3 {
namespace fs = std::filesystem;

void add_serve_flags(CLI::App& cmd, ServeConfig& c) {
  auto& s = c.server;
  cmd.add_option("model", c.model, "Model directory or Hugging Face id (found in the local HF cache)");
  cmd.add_option("--model,--model-path", c.model, "Same as the positional MODEL");
  cmd.add_option("--device", c.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_option("--host", s.host, "Address to listen on");
  cmd.add_option("--port", s.port, "Port to listen on")->check(CLI::Range(0, 65535));
  cmd.add_option("--served-model-name", s.served_model_names, "Name(s) clients use for the model");
  cmd.add_option("--api-key", s.api_keys, "Require this key (Authorization: Bearer or x-api-key)")
      ->envname("M3_API_KEY");
  cmd.add_option("--allowed-origins", s.allowed_origins, "CORS origins (default: CORS off)");
  cmd.add_option("--tensor-parallel-size,--tp-size,--tp_size,--tp", c.tensor_parallel,
                 "Tensor-parallel GPUs");
  add_rank_flags(cmd, c.launch);
  cmd.add_option("--data-parallel-size,--dp-size,--dp", c.data_parallel,
                 "Data-parallel attention ranks; with --enable-expert-parallel the experts are split over "
                 "them (DEP)");
  cmd.add_option(
      "--expert-placement,--init-expert-location", c.expert_placement_file,
      "Routing histogram (JSON {\"expert_tokens\": [...]} or a saved /metrics) to balance the experts "
      "over the expert-parallel ranks by");
  cmd.add_flag(
      "--enable-dp-attention,--enable_attention_dp", c.enable_attention_dp,
      "Data-parallel attention over the --tensor-parallel-size ranks, experts split over them (DEP)");
  cmd.add_option("--ep-size,--moe_expert_parallel_size,--expert-parallel-size", c.expert_parallel,
                 "Expert-parallel GPUs");
  cmd.add_flag("--enable-expert-parallel", c.enable_expert_parallel,
               "Split the routed experts over the ranks by expert (whole experts per rank)");
  cmd.add_option("--block-size,--page-size", c.block_size,
                 "KV block size; must equal the model's MSA block (128)");
  cmd.add_option("--max-model-len,--context-length,--max_seq_len", c.engine.max_model_len,
                 "Longest prompt + output (default: the model's)");
  cmd.add_option("--max-num-seqs,--max-running-requests,--max_batch_size", c.engine.max_num_seqs,
                 "Sequences per engine step")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--max-num-batched-tokens,--max_num_tokens,--chunked-prefill-size",
                 c.engine.max_num_batched_tokens, "Token budget per engine step")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--gpu-memory-utilization,--mem-fraction-static", c.gpu_memory_utilization,
                 "Fraction of GPU memory for weights + KV (cuda)")
      ->check(CLI::Range(0.01, 1.0));
  cmd.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.engine.enable_prefix_caching,
               "Reuse the KV pages (and MSA index keys) of prompt prefixes seen before (default: on)");
  cmd.add_option_function<double>(
         "--kv-offloading-size", [&c](double gib) { c.kv_offloading_bytes = gib * double(1ull << 30); },
         "GiB of pinned host memory for the prefix cache's host tier: pages evicted from the device pool "
         "spill "
         "there (with their MSA index keys) and come back by a copy instead of a recompute")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option_function<std::string>(
      "--kv-offloading-backend",
      [](const std::string& v) {
        if (v != "native")
          fail(ErrorKind::kUnsupported, "--kv-offloading-backend '" + v + "' is not supported (native)");
      },
      "native (the built-in host tier)");
  cmd.add_option_function<double>(
         "--hicache-size", [&c](double gb) { c.kv_offloading_bytes = gb * 1e9; },
         "SGLang's spelling of the host tier's size, in GB")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--enable-hierarchical-cache", c.enable_hierarchical_cache,
               "SGLang: the host tier (give its size with --hicache-size)");
  cmd.add_option("--kv-cache-dtype", c.kv_cache_dtype,
                 "auto | bfloat16 | fp8 (= fp8_e4m3: K and V in e4m3, a scale per token and KV head)");
  cmd.add_option("--dtype", c.dtype, "auto | bfloat16");
  cmd.add_option(
      "--quantization,-q", c.quantization,
      "fp8: FP8 linear weights (MXFP8 blocks of 32), quantised at load from a bf16 checkpoint; mxfp8: "
      "the MXFP8 checkpoint's own (its default: FP8 on the GPU)");
  cmd.add_option("--reasoning-parser,--reasoning_parser", c.reasoning_parser,
                 "minimax_m3 | none (default for a MiniMax-M3 checkpoint: minimax_m3)");
  cmd.add_option("--tool-call-parser,--tool_parser,--tool-parser", c.tool_parser,
                 "minimax_m3 | none (default for a MiniMax-M3 checkpoint: minimax_m3)");
  cmd.add_flag_function(
      "--enable-auto-tool-choice", [&c](int64_t) { c.auto_tool_choice = true; },
      "Let the model decide when to call tools (default: on with the minimax_m3 tool parser)");
  cmd.add_flag_function(
      "--no-enable-auto-tool-choice", [&c](int64_t) { c.auto_tool_choice = false; },
      "Answer tool_choice \"auto\" with a 400, as vLLM does without --enable-auto-tool-choice");
  cmd.add_option("--chat-template,--chat_template", c.chat_template,
                 "Jinja chat template file (default: the model's)");
  cmd.add_option("--extra-llm-api-options,--extra_llm_api_options,--config", c.extra_options_yaml,
                 "TensorRT-LLM style YAML options");
  cmd.add_option("--max-logprobs", s.max_logprobs, "Cap on logprobs / top_logprobs");
  cmd.add_option("--max-queued-requests,--max-pending", c.max_pending, "Requests in flight before 429");
  cmd.add_option("--shutdown-timeout", s.shutdown_timeout_s, "Seconds in-flight requests get after SIGTERM");
  cmd.add_option("--max-body-bytes", s.http.max_body_bytes,
                 "Largest request body, also after gzip / deflate / br decoding (413 above)");
  cmd.add_option("--max-connections", s.http.max_connections, "Open HTTP connections (503 beyond)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--timeout-keep-alive", s.http.idle_timeout_s,
                 "Seconds an idle keep-alive connection is kept open")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--http-header-timeout", s.http.header_timeout_s,
                 "Seconds a client has to send a request's headers (408 after)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--http-body-timeout", s.http.body_timeout_s,
                 "Seconds a client has to send a request's body (408 after)")
      ->check(CLI::PositiveNumber);
  cmd.add_flag_function(
      "--disable-request-decompression", [&s](int64_t) { s.http.decompress = false; },
      "Refuse compressed request bodies (415) instead of inflating them");
  cmd.add_option("--http-io-threads", s.http.io_threads, "HTTP I/O threads (0: up to 4)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--api-worker-threads", s.worker_threads,
                 "Threads for request parsing, prompts and response text (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--num-kv-pages", c.num_kv_pages, "KV pages (cpu; default from --kv-cache-gb)");
  cmd.add_option("--kv-cache-gb", c.kv_cache_gb, "KV pool size (cpu)");
  cmd.add_option("--load-format", c.load_format,
                 "auto | safetensors | dummy (cuda: random weights generated on the device, for benchmarks)");
  cmd.add_flag("--enforce-eager,--disable-cuda-graph", c.enforce_eager,
               "cuda: run decode steps eagerly instead of replaying CUDA graphs");
  cmd.add_flag("--disable-log-stats", c.disable_log_stats, "do not log engine statistics periodically");
  cmd.add_option("--log-stats-interval", c.log_stats_interval_s,
                 "seconds between engine statistics lines (throughput, running / waiting, KV usage)")
      ->check(CLI::Range(0.05, 86400.0));
  cmd.add_option("--scripted-responses", c.scripted_responses,
                 "testing: emit scripted outputs instead of running the model")
      ->check(CLI::ExistingFile);
  // Image and video input (a model with a vision tower).
  cmd.add_option(
      "--allowed-local-media-path", s.media.policy.allowed_local_media_path,
      "Directory that file:// image and video URLs may read from (default: none; file:// refused)");
  cmd.add_option_function<std::string>(
      "--allowed-media-domains",
      [&s](const std::string& v) {
        for (size_t at = 0; at <= v.size();) {
          const size_t comma = std::min(v.find(',', at), v.size());
          if (comma > at) s.media.policy.allowed_media_domains.push_back(v.substr(at, comma - at));
          at = comma + 1;
        }
      },
      "Comma-separated hosts whose http(s) media URLs may be fetched (default: none)");
  cmd.add_option_function<std::string>(
      "--limit-mm-per-prompt",
      [&s](const std::string& v) {
        const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
        if (!j.is_object())
          fail(ErrorKind::kInvalidArgument, "--limit-mm-per-prompt: expected JSON such as '{\"image\": 4}'");
        for (const auto& [k, n] : j.items()) {
          if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1024)
            fail(ErrorKind::kInvalidArgument,
                 "--limit-mm-per-prompt: '" + k + "' must be an integer in [0, 1024]");
          if (k == "image")
            s.media.max_images_per_prompt = n.get<int>();
          else if (k == "video")
            s.media.max_videos_per_prompt = n.get<int>();
          else
            fail(ErrorKind::kInvalidArgument, "--limit-mm-per-prompt: unknown modality '" + k + "'");
        }
      },
      "Most images and videos per prompt, as JSON (default '{\"image\": 16, \"video\": 4}')");
  cmd.add_option_function<std::string>(
      "--media-io-kwargs",
      [&s](const std::string& v) {
        const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
        if (!j.is_object())
          fail(ErrorKind::kInvalidArgument,
               "--media-io-kwargs: expected JSON such as '{\"video\": {\"fps\": 2}}'");
        for (const auto& [modality, kw] : j.items()) {
          if (modality != "video" || !kw.is_object())
            fail(ErrorKind::kInvalidArgument, "--media-io-kwargs: only '{\"video\": {...}}' is supported");
          for (const auto& [k, x] : kw.items()) {
            if (k == "fps" && x.is_number() && x.get<double>() > 0 && x.get<double>() <= 240)
              s.media.sampling.fps = x.get<double>();
            else if (k == "num_frames" && x.is_number_integer() && x.get<int64_t>() >= -1 &&
                     x.get<int64_t>() <= 100000)
              s.media.sampling.num_frames = std::max(0, x.get<int>());  // -1: every frame at `fps`
            else
              fail(ErrorKind::kInvalidArgument,
                   "--media-io-kwargs: video '" + k +
                       "' must be fps in (0, 240] or num_frames (an integer >= -1)");
          }
        }
      },
      "How videos are sampled, as JSON: '{\"video\": {\"fps\": 1.0}}' (default: 1 frame per second) or "
      "'{\"video\": {\"num_frames\": 32}}' (that many, evenly spread)");
  cmd.add_option_function<double>(
         "--mm-processor-cache-gb",
         [&c](double gb) { c.engine.mm_cache_bytes = size_t(std::max(0.0, gb) * double(1ull << 30)); },
         "Vision features kept for repeated images, GiB (default 4; 0: off)")
      ->check(CLI::Range(0.0, 1024.0));
  cmd.add_option("--max-image-bytes", s.media.decode.max_bytes, "Largest encoded image accepted (bytes)");
  cmd.add_option(
      "--max-video-bytes", s.media.video.max_bytes,
      "Largest encoded video accepted (bytes, default 256 MiB; the request body limit applies too)");
  cmd.add_option("--max-video-frames", s.media.video.max_sampled_frames,
                 "Most frames taken from one video; more samples are thinned evenly (default 768)")
      ->check(CLI::Range(1, 100000));
  // Accepted for compatibility with the deployment guides; m3serve picks its own kernels.
  for (const char* name : {"--attention-backend", "--mm-encoder-attn-backend", "--mm-attention-backend",
                           "--mm-encoder-tp-mode", "--mm-processor-cache-type", "--moe-backend",
                           "--moe-runner-backend", "--backend", "--hf-overrides", "--generation-config"})
    cmd.add_option_function<std::string>(
        name, [&c, name](const std::string& v) { c.ignored_flags.push_back(std::string(name) + " " + v); },
        "accepted; no effect in m3serve");
  for (const char* name : {"--trust-remote-code,--trust_remote_code", "--language-model-only",
                           "--enable-multimodal", "--disable-log-requests"})
    cmd.add_flag_function(
        name, [&c, name](int64_t) { c.ignored_flags.push_back(name); }, "accepted; no effect");
}

std::string resolve_model_dir(const std::string& model) {
  if (model.empty())
    fail(ErrorKind::kInvalidArgument, "MODEL is required (a model directory or a Hugging Face id)");
  if (fs::is_directory(model)) return model;
  // A Hugging Face id: look in the local cache (no downloads here).
  if (model.find('/') != std::string::npos && !fs::exists(model)) {
    std::vector<fs::path> roots;
    if (const char* h = std::getenv("HF_HUB_CACHE")) roots.emplace_back(h);
    if (const char* h = std::getenv("HF_HOME")) roots.push_back(fs::path(h) / "hub");
    if (const char* h = std::getenv("HOME")) roots.push_back(fs::path(h) / ".cache/huggingface/hub");
    std::string key = "models--" + model;
    for (size_t p; (p = key.find('/')) != std::string::npos;) key.replace(p, 1, "--");
    for (const auto& root : roots) {
      fs::path snaps = root / key / "snapshots";
      if (!fs::is_directory(snaps)) continue;
      for (const auto& e : fs::directory_iterator(snaps))
        if (fs::exists(e.path() / "config.json")) return e.path().string();
    }
    fail(ErrorKind::kNotFound, "model '" + model +
                                   "' is neither a directory nor in the local Hugging Face cache "
                                   "(downloading is not supported: pass the checkpoint directory)");
  }
  fail(ErrorKind::kNotFound, "model directory '" + model + "' does not exist");
}

namespace {

void merge_yaml(ServeConfig& c, const ModelConfig& model) {
  YAML::Node y;
  try {
    y = YAML::LoadFile(c.extra_options_yaml);
  } catch (const std::exception& e) {
    fail(ErrorKind::kInvalidArgument, "--extra_llm_api_options " + c.extra_options_yaml + ": " + e.what());
  }
  const std::string where = "--extra_llm_api_options " + c.extra_options_yaml + ": ";
  if (!y.IsMap()) fail(ErrorKind::kInvalidArgument, where + "not a YAML mapping");
  try {
    if (auto s = y["sparse_attention_config"]) {
      std::string algo = s["algorithm"] ? s["algorithm"].as<std::string>() : "";
      if (algo != "minimax_m3")
        fail(ErrorKind::kInvalidArgument,
             where + "sparse_attention_config.algorithm must be minimax_m3, got '" + algo + "'");
      if (!model.any_sparse())
        fail(ErrorKind::kInvalidArgument,
             where + "sparse_attention_config is set but the model has no sparse layers");
    }
    if (auto k = y["kv_cache_config"]) {
      // TensorRT-LLM must turn block reuse off on the sparse path; m3serve reuses pages with their index
      // keys.
      if (k["enable_block_reuse"]) c.engine.enable_prefix_caching = k["enable_block_reuse"].as<bool>();
      if (k["free_gpu_memory_fraction"])
        c.gpu_memory_utilization = k["free_gpu_memory_fraction"].as<double>();
      if (k["dtype"]) c.kv_cache_dtype = k["dtype"].as<std::string>();
      if (k["host_cache_size"]) c.kv_offloading_bytes = k["host_cache_size"].as<double>();
      if (k["tokens_per_block"] && k["tokens_per_block"].as<int>() != model.msa.block_size)
        fail(ErrorKind::kInvalidArgument, where + "kv_cache_config.tokens_per_block must be " +
                                              std::to_string(model.msa.block_size) +
                                              " (the model's MSA block)");
    }
    if (y["max_batch_size"]) c.engine.max_num_seqs = y["max_batch_size"].as<int>();
    if (y["max_num_tokens"]) c.engine.max_num_batched_tokens = y["max_num_tokens"].as<int>();
    if (y["max_seq_len"]) c.engine.max_model_len = y["max_seq_len"].as<int64_t>();
    if (y["tensor_parallel_size"]) c.tensor_parallel = y["tensor_parallel_size"].as<int>();
    if (y["moe_expert_parallel_size"]) c.expert_parallel = y["moe_expert_parallel_size"].as<int>();
    if (y["enable_attention_dp"]) c.enable_attention_dp = y["enable_attention_dp"].as<bool>();
    for (const char* k : {"cuda_graph_config", "moe_config", "enable_chunked_prefill", "print_iter_log",
                          "backend", "disable_overlap_scheduler", "stream_interval", "attn_backend"})
      if (y[k]) c.ignored_flags.push_back(std::string("yaml ") + k);
  } catch (const YAML::Exception& e) {
    fail(ErrorKind::kInvalidArgument, where + e.what());
  }
}

// A parser flag's value: true for minimax_m3, false for none; unset, the MiniMax-M3 family's parsers are the
// default (the SGLang and TensorRT-LLM guides start the server without parser flags and expect tool calls).
bool parser_enabled(const std::string& flag, const std::string& v, const ModelConfig& model) {
  if (v.empty()) return model.architecture.rfind("MiniMaxM3", 0) == 0;
  if (v == "minimax_m3" || v == "minimax-m3" || v == "minimax") return true;
  if (v == "none") return false;
  fail(ErrorKind::kInvalidArgument, flag + " '" + v + "' is not supported (available: minimax_m3, none)");
}

}  // namespace

void finalize_serve_config(ServeConfig& c, const ModelConfig& model) {
  if (!c.extra_options_yaml.empty()) merge_yaml(c, model);
  // DEP, as each peer spells it: vLLM --data-parallel-size N --enable-expert-parallel (tp 1); SGLang --tp N
  // --enable-dp-attention (--dp N); TensorRT-LLM tp_size N + enable_attention_dp. The N ranks attend for
  // their own requests with the whole attention, and split the routed experts.
  if (c.enable_attention_dp) {
    if (c.data_parallel == 1) c.data_parallel = c.tensor_parallel;
    if (c.data_parallel != c.tensor_parallel)
      fail(ErrorKind::kUnsupported, "--enable-dp-attention: --dp-size " + std::to_string(c.data_parallel) +
                                        " must equal --tp-size " + std::to_string(c.tensor_parallel) +
                                        " (one attention rank per GPU)");
    c.tensor_parallel = 1;
    c.enable_expert_parallel = true;
  }
  const int ranks = c.tensor_parallel * c.data_parallel;
  if (c.data_parallel < 1)
    fail(ErrorKind::kInvalidArgument,
         "--data-parallel-size " + std::to_string(c.data_parallel) + ": must be at least 1");
  if (c.data_parallel > 1 && c.tensor_parallel != 1)
    fail(ErrorKind::kUnsupported, "--data-parallel-size " + std::to_string(c.data_parallel) +
                                      " with --tensor-parallel-size " + std::to_string(c.tensor_parallel) +
                                      ": data-parallel attention runs one attention rank per GPU; use "
                                      "--data-parallel-size " +
                                      std::to_string(ranks) + " --enable-expert-parallel");
  // Experts over all the ranks (vLLM's --enable-expert-parallel, TensorRT-LLM's TEP / DEP).
  if (c.expert_parallel != 1 && c.expert_parallel != ranks)
    fail(ErrorKind::kUnsupported,
         "--ep-size " + std::to_string(c.expert_parallel) +
             ": experts are split over all the ranks, so it must be 1 or the number of ranks (" +
             std::to_string(ranks) + ")");
  if (c.expert_parallel > 1) c.enable_expert_parallel = true;
  if (c.data_parallel > 1 && !c.enable_expert_parallel)
    fail(ErrorKind::kUnsupported, "--data-parallel-size " + std::to_string(c.data_parallel) +
                                      " needs --enable-expert-parallel: the ranks attend for their own "
                                      "requests and split the routed experts (DEP); whole-model replicas "
                                      "are separate servers behind a load balancer");
  // A size the heads, widths and experts do not split into fails here.
  if (c.data_parallel > 1)
    make_dep_shard_layout(model, c.data_parallel, 0);
  else
    make_shard_layout(model, c.tensor_parallel, 0, c.enable_expert_parallel);
  c.launch.world_size = ranks;
  if (!c.expert_placement_file.empty())
    c.expert_placement = expert_placement_from_file(c.expert_placement_file, model.num_experts,
                                                    c.enable_expert_parallel ? ranks : 1);
  if (c.block_size != 0 && c.block_size != model.msa.block_size)
    fail(ErrorKind::kInvalidArgument, "--block-size " + std::to_string(c.block_size) +
                                          " must equal the model's MSA block "
                                          "size (" +
                                          std::to_string(model.msa.block_size) +
                                          "): KV pages are MSA blocks");
  validate_precision(c.quantization, c.kv_cache_dtype, model);
  if (c.enable_hierarchical_cache && c.kv_offloading_bytes <= 0)
    fail(ErrorKind::kInvalidArgument,
         "--enable-hierarchical-cache needs --hicache-size GB (the host tier's size)");
  if (c.kv_offloading_bytes > 0 && c.data_parallel > 1)
    fail(ErrorKind::kUnsupported,
         "--kv-offloading-size / host_cache_size: the prefix cache's host tier needs --data-parallel-size 1");
  if (c.kv_offloading_bytes > 0 && !c.engine.enable_prefix_caching)
    fail(ErrorKind::kInvalidArgument,
         "--kv-offloading-size / host_cache_size is the prefix cache's host tier: it needs prefix caching "
         "(drop --no-enable-prefix-caching / enable_block_reuse: false)");
  if (c.dtype != "auto" && c.dtype != "bfloat16" && c.dtype != "bf16")
    fail(ErrorKind::kUnsupported, "--dtype '" + c.dtype + "' is not supported (auto | bfloat16)");
  c.server.reasoning_parser = parser_enabled("--reasoning-parser", c.reasoning_parser, model);
  c.server.tool_parser = parser_enabled("--tool-call-parser", c.tool_parser, model);
  if (c.auto_tool_choice.value_or(false) && !c.server.tool_parser)
    fail(ErrorKind::kInvalidArgument, "--enable-auto-tool-choice needs --tool-call-parser minimax_m3");
  c.server.auto_tool_choice = c.auto_tool_choice.value_or(c.server.tool_parser);
  if (c.server.served_model_names.empty()) c.server.served_model_names.push_back(c.model);
  c.server.model_root = c.model;
  for (const auto& f : c.ignored_flags) log_info("accepted ", f, " (no effect in m3serve)");
}

}  // namespace m3
