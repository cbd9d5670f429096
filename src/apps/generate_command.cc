// Reads every request first (a bad line is reported with its number and the rest still run), sizes the KV
// pool for what the requests need, runs them batched through the engine, and writes one output line per input
// line in input order. Exit status 1 when any line was rejected.
#include "apps/generate_command.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "apps/generation_input.h"
#include "apps/rank_launch.h"
#include "common/error.h"
#include "common/log.h"
#include "config/expert_placement.h"
#include "config/model_config.h"
#include "config/shard_layout.h"
#include "dist/rank_protocol.h"
#include "engine/engine.h"
#include "server/output_processor.h"
#include "tokenizer/tokenizer_config.h"

namespace m3 {
namespace {

struct GenerateArgs {
  std::string model, device = "auto", input = "-", output = "-", quantization, kv_cache_dtype = "auto";
  int max_num_seqs = 256, max_num_batched_tokens = 8192, num_kv_pages = 0;
  int64_t max_model_len = 0;
  double kv_cache_gb = 4.0;
  bool prefix_caching = true;
  bool expert_parallel = false;  // --enable-expert-parallel
  int data_parallel = 1;         // --data-parallel-size (DEP: needs expert_parallel and tp 1)
  std::string expert_placement;  // --expert-placement FILE
  dist::LaunchFlags launch;      // world_size: --tensor-parallel-size
};

struct Line {
  int number = 0;
  std::optional<GenerationRequest> request;
  std::string error;
  int64_t engine_id = -1;
  std::vector<int32_t> output;
  std::string text;
  std::string finish;
  std::unique_ptr<OutputProcessor> proc;  // with a tokenizer: text and stop strings
};

std::vector<Line> read_lines(std::istream& in, const GenerationDefaults& defaults, const Tokenizer* tok,
                             const PromptModel* chat) {
  std::vector<Line> lines;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    line.number = number;
    try {
      auto j = nlohmann::ordered_json::parse(text, nullptr, false);
      if (j.is_discarded()) fail(ErrorKind::kInvalidArgument, "not valid JSON");
      line.request = parse_generation_request(j, defaults, tok, chat);
    } catch (const Error& e) {
      line.error = e.what();
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

int kv_pages_needed(const ModelConfig& c, const std::vector<Line>& lines, const GenerateArgs& a) {
  if (a.num_kv_pages > 0) return a.num_kv_pages;
  const int64_t page = c.msa.block_size;
  const int64_t budget = static_cast<int64_t>(a.kv_cache_gb * (1ull << 30) / cpu_kv_bytes_per_page(c));
  int64_t total = 0, largest = 1;
  for (const Line& l : lines)
    if (l.request) {
      int64_t need = (static_cast<int64_t>(l.request->request.prompt.size()) + l.request->request.max_tokens +
                      page - 1) /
                     page;
      total += need;
      largest = std::max(largest, need);
    }
  return static_cast<int>(std::max(largest, std::min(std::max<int64_t>(total, 1), budget)));
}

int run(const GenerateArgs& a) {
  ModelConfig config = load_model_config(a.model);
  dist::LaunchFlags launch = a.launch;
  if (a.data_parallel > 1) {  // DEP: one attention rank per process, the experts split over them
    if (launch.world_size != 1 || !a.expert_parallel)
      fail(ErrorKind::kUnsupported, "--data-parallel-size " + std::to_string(a.data_parallel) +
                                        " needs --enable-expert-parallel and --tensor-parallel-size 1");
    make_dep_shard_layout(config, a.data_parallel, 0);
    launch.world_size = a.data_parallel;
  } else {
    // A TP size the model (or its experts, with expert parallelism) does not split into fails here.
    make_shard_layout(config, launch.world_size, 0, a.expert_parallel);
  }
  const std::vector<int32_t> placement =
      a.expert_placement.empty() ? std::vector<int32_t>{}
                                 : expert_placement_from_file(a.expert_placement, config.num_experts,
                                                              a.expert_parallel ? launch.world_size : 1);
  const std::string device = resolve_device(a.device);
  int rank_exit = 0;
  const auto comm = start_ranks(launch, device, a.model, &rank_exit);
  if (!comm) return rank_exit;                 // this process supervised the ranks, or was a worker rank
  std::optional<dist::WorkerRelease> workers;  // rank 0 releases the workers when it ends
  if (*comm) workers.emplace(**comm);

  GenerationDefaults defaults = load_generation_defaults(a.model);
  std::optional<Tokenizer> tok;
  std::optional<chat::ChatTemplate> chat_template;
  SpecialTokenStrings special;
  std::optional<PromptModel> chat;  // the server's prompt renderer
  const std::filesystem::path dir(a.model);
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    tok = Tokenizer::load((dir / "tokenizer.json").string());
    if (std::filesystem::exists(dir / "chat_template.jinja")) {
      special = load_special_token_strings(a.model);
      chat_template = chat::ChatTemplate::from_file((dir / "chat_template.jinja").string());
      chat.emplace(PromptModel{*tok, *chat_template, special.bos, special.eos});
    }
  }
  std::vector<Line> lines;
  if (a.input == "-") {
    lines = read_lines(std::cin, defaults, tok ? &*tok : nullptr, chat ? &*chat : nullptr);
  } else {
    std::ifstream in(a.input);
    if (!in) fail(ErrorKind::kNotFound, "--input '" + a.input + "': cannot open");
    lines = read_lines(in, defaults, tok ? &*tok : nullptr, chat ? &*chat : nullptr);
  }
  BackendOptions bo;
  bo.device = device;
  bo.comm = *comm;
  bo.num_kv_pages = kv_pages_needed(config, lines, a);
  bo.max_num_batched_tokens = a.max_num_batched_tokens;
  bo.max_num_seqs = a.max_num_seqs;
  bo.max_model_len = a.max_model_len;
  bo.quantization = a.quantization;
  bo.kv_cache_dtype = a.kv_cache_dtype;
  bo.expert_parallel = a.expert_parallel;
  bo.data_parallel = a.data_parallel;
  bo.expert_placement = placement;
  auto t0 = std::chrono::steady_clock::now();
  Engine engine(load_backend(a.model, bo),
                {a.max_num_seqs, a.max_num_batched_tokens, a.max_model_len, a.prefix_caching});
  auto t1 = std::chrono::steady_clock::now();

  std::map<int64_t, Line*> by_id;
  for (Line& l : lines) {
    if (!l.request) continue;
    try {
      l.engine_id = engine.add(l.request->request);
      by_id[l.engine_id] = &l;
      if (tok) {
        TextOptions text;
        text.stop = l.request->stop;
        l.proc = std::make_unique<OutputProcessor>(*tok, text);
      }
    } catch (const Error& e) {
      l.error = e.what();
    }
  }
  int64_t generated = 0, steps = 0;
  while (engine.has_work()) {
    for (const TokenEvent& ev : engine.step()) {
      Line* l = by_id.at(ev.request_id);
      l->output.push_back(ev.token);
      l->finish = finish_reason_name(ev.finish);
      ++generated;
      if (!l->proc) continue;
      OutputDelta d = l->proc->on_event(ev);
      l->text += d.content;
      if (l->proc->stop_string_hit()) {  // the stop string ends the request here
        engine.abort(ev.request_id);
        l->finish = "stop";
      }
    }
    ++steps;
  }
  auto t2 = std::chrono::steady_clock::now();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  log_info("generated ", generated, " tokens for ", by_id.size(), " requests in ", steps, " steps, ",
           secs(t2 - t1), " s (model load ", secs(t1 - t0), " s)");

  std::ofstream file;
  if (a.output != "-") {
    file.open(a.output);
    if (!file) fail(ErrorKind::kInvalidArgument, "--output '" + a.output + "': cannot write");
  }
  std::ostream& out = a.output == "-" ? std::cout : file;
  int failures = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    nlohmann::json j = {{"index", i}};
    if (!l.error.empty()) {
      ++failures;
      log_error("input line ", l.number, ": ", l.error);
      j["error"] = {{"line", l.number}, {"message", l.error}};
    } else {
      j["output_token_ids"] = l.output;
      if (l.proc) j["text"] = l.text;
      j["finish_reason"] = l.finish;
    }
    out << j.dump() << "\n";
  }
  out.flush();
  return failures ? 1 : 0;
}

}  // namespace

void register_generate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Offline batched generation from a JSONL file of requests");
  cmd->add_option("--model,model", args->model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--device", args->device, "Backend: auto | cpu | cuda (auto: cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option(
      "--input", args->input,
      "JSONL requests ('-' = stdin): {\"prompt_token_ids\": [...], \"max_tokens\", \"temperature\", "
      "\"top_p\", \"top_k\", \"min_p\", \"seed\", \"ignore_eos\", \"stop_token_ids\", \"images\": [image "
      "files "
      "for the prompt's expanded image placeholders]}");
  cmd->add_option("--output", args->output,
                  "JSONL results ('-' = stdout): {\"index\", \"output_token_ids\", "
                  "\"finish_reason\"} or {\"index\", \"error\"}");
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "Sequences per step")->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "Token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", args->max_model_len, "Longest prompt + output (default: the model's)");
  cmd->add_option("--quantization,-q", args->quantization,
                  "fp8: FP8 linear weights (MXFP8 blocks), quantised at load from a bf16 checkpoint");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args->prefix_caching,
                "Reuse the KV pages of prompt prefixes seen before (default: on)");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "auto | bfloat16 | fp8 (= fp8_e4m3: K and V in e4m3, a scale per token and KV head)");
  cmd->add_option("--num-kv-pages", args->num_kv_pages,
                  "KV pages to allocate (default: what the requests need)");
  cmd->add_option("--kv-cache-gb", args->kv_cache_gb, "Cap on the default KV pool size (cpu)");
  cmd->add_option("--tensor-parallel-size,--tp-size,--tp", args->launch.world_size,
                  "Ranks the model is split over (self-spawned under mpirun, or mpirun / srun's tasks)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--enable-expert-parallel", args->expert_parallel,
                "Split the routed experts over the ranks by expert (whole experts per rank)");
  cmd->add_option(
         "--data-parallel-size,--dp-size,--dp", args->data_parallel,
         "Data-parallel attention ranks, the experts split over them (with --enable-expert-parallel)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--expert-placement,--init-expert-location", args->expert_placement,
                  "Routing histogram to balance the experts over the expert-parallel ranks by");
  add_rank_flags(*cmd, args->launch);
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace m3
