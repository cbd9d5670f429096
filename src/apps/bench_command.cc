// Flag spellings and defaults are vLLM's (`vllm bench serve`), plus the short forms its docs use through
// argparse prefix matching (--random-input, --random-output, --num-prompt), and the --agent-* flags of
// m3serve's own agent workload. Repeating a flag keeps the last value, as argparse does. Values are checked
// by bench::run_serve_benchmark, which names the flag.
#include "apps/bench_command.h"

#include <unistd.h>

#include <filesystem>
#include <memory>

#include "bench/grammar_bench.h"
#include "bench/serve_bench.h"

namespace m3 {
namespace {

// Flags whose "not given" differs from any value they can take.
struct BenchServeArgs {
  bench::ServeBenchOptions o;
  std::string label;
  int max_concurrency = 0;
  int output_len = 0;
  double top_p = 0, min_p = 0, frequency_penalty = 0, presence_penalty = 0, repetition_penalty = 0;
  int top_k = 0, logprobs = 0;
  double temperature = 0.0;
  CLI::Option *label_opt = nullptr, *max_concurrency_opt = nullptr, *output_len_opt = nullptr,
              *top_p_opt = nullptr, *min_p_opt = nullptr, *frequency_penalty_opt = nullptr,
              *presence_penalty_opt = nullptr, *repetition_penalty_opt = nullptr, *top_k_opt = nullptr,
              *logprobs_opt = nullptr;

  bench::ServeBenchOptions resolve() const {
    bench::ServeBenchOptions r = o;
    if (label_opt->count()) r.label = label;
    if (max_concurrency_opt->count()) r.max_concurrency = max_concurrency;
    if (output_len_opt->count())  // vLLM: the general --output-len overrides every dataset's
      r.random.output_len = r.prefix_repetition.output_len = r.agent.output_len = output_len;
    r.temperature = temperature;
    if (top_p_opt->count()) r.top_p = top_p;
    if (min_p_opt->count()) r.min_p = min_p;
    if (frequency_penalty_opt->count()) r.frequency_penalty = frequency_penalty;
    if (presence_penalty_opt->count()) r.presence_penalty = presence_penalty;
    if (repetition_penalty_opt->count()) r.repetition_penalty = repetition_penalty;
    if (top_k_opt->count()) r.top_k = top_k;
    if (logprobs_opt->count()) r.logprobs = logprobs;
    return r;
  }
};

}  // namespace

void register_bench_command(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench",
                                       "Benchmarks (serve: load-test an OpenAI-compatible server; kernels: "
                                       "the CUDA kernel benchmarks; grammar: "
                                       "structured-output compile and mask times)");
  bench->require_subcommand(1);
  register_bench_serve_command(*bench, exit_code);
  register_bench_grammar_command(*bench, exit_code);
  register_bench_kernels_command(*bench, exit_code);
}

void register_bench_grammar_command(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<bench::GrammarBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "grammar",
      "Structured output on the host: compile time per grammar and token-mask time per token and per batch "
      "step, at the real vocabulary (any JSON object, each --schema, each --tools list's tool-call markup)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json or a model directory")->required();
  cmd->add_option("--eos-token-id", o->stop_ids, "EOS ids (default 200020, MiniMax-M3's)");
  cmd->add_option("--schema", o->schemas, "a file holding a JSON schema (repeatable)");
  cmd->add_option(
      "--tools", o->tools,
      "a file with tools: a list, a request body with \"tools\", or a recorded session (repeatable)");
  cmd->add_option("--batch-sizes", o->batch_sizes, "rows stepped in lockstep (default 1 64)");
  cmd->add_option("--steps", o->steps, "tokens per walk (default 128)");
  cmd->add_option("--seed", o->seed, "random walk seed");
  cmd->add_option("--result-json", o->result_json, "also write the results as JSON here");
  cmd->callback([o, &exit_code] { exit_code = bench::run_grammar_benchmark(*o); });
}

void register_bench_kernels_command(CLI::App& bench, int& exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "kernels",
      "Run m3-kernel-bench (built with CUDA next to m3): every hot kernel and whole decode / prefill steps "
      "against the H200 floors; every argument goes to it (--filter A,B --iters N --quick --json FILE)");
  cmd->prefix_command();  // pass every argument through
  cmd->callback([cmd, &exit_code] {
    // The benchmark binary sits next to this executable (same build tree or build-gpu/).
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::filesystem::path bin =
        self.parent_path() / (std::filesystem::exists(self.parent_path() / "benchmarks")
                                  ? "benchmarks/m3-kernel-bench"
                                  : "m3-kernel-bench");
    if (ec || !std::filesystem::exists(bin)) {
      std::fprintf(stderr,
                   "error: m3 bench kernels: %s not found (it is built only with the CUDA backend: "
                   "cmake -DM3_CUDA=ON, target m3-kernel-bench)\n",
                   bin.string().c_str());
      exit_code = 2;
      return;
    }
    std::vector<std::string> extra = cmd->remaining();
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (std::string& e : extra) argv.push_back(e.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    std::perror("error: m3 bench kernels: exec");
    exit_code = 1;
  });
}

void register_bench_serve_command(CLI::App& bench, int& exit_code) {
  auto a = std::make_shared<BenchServeArgs>();
  bench::ServeBenchOptions& o = a->o;
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Benchmark an OpenAI-compatible server as `vllm bench serve` does: random or prefix_repetition prompts "
      "(or m3serve's multi-turn agent workload), streaming requests, TTFT / TPOT / ITL / E2EL and throughput "
      "in vLLM's report and --save-result JSON");
  cmd->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto list = [](CLI::Option* opt) { opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll); };
  auto unset = [](CLI::Option* opt) { return opt->default_str(""); };  // not given: nothing is sent

  cmd->add_option(
      "--backend", o.backend,
      "openai (/v1/completions; also vllm, sglang-oai, lmdeploy) | openai-chat (/v1/chat/completions; "
      "also vllm-chat, sglang-oai-chat)");
  cmd->add_option("--base-url", o.base_url, "Server URL, e.g. http://host:8000 (default: http://HOST:PORT)");
  cmd->add_option("--host", o.host, "Server host when --base-url is not given");
  cmd->add_option("--port", o.port, "Server port when --base-url is not given");
  cmd->add_option("--endpoint", o.endpoint,
                  "API path (default: /v1/completions, or /v1/chat/completions for openai-chat)");
  list(cmd->add_option("--header", o.headers, "KEY=VALUE headers sent with every request"));
  cmd->add_option("--api-key", o.api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option(
      "--model", o.model,
      "Model id recorded in the result and sent as \"model\" (default: the first model of /v1/models)");
  cmd->add_option("--served-model-name", o.served_model_name,
                  "The \"model\" sent in requests (default: --model)");
  cmd->add_option(
      "--tokenizer", o.tokenizer,
      "Model directory or tokenizer.json (default: --model when it is a local directory, else the "
      "server's /v1/models root when that is one)");
  a->label_opt =
      unset(cmd->add_option("--label", a->label, "Result label and file-name prefix (default: --backend)"));

  cmd->add_option(
      "--dataset-name", o.dataset_name,
      "random | prefix_repetition (vLLM's: --prefix-repetition-* prefixes, each shared by its share of "
      "--num-prompts requests) | agent (m3serve's: --agent-conversations multi-turn conversations sharing "
      "one --agent-system-len system prompt; turn t+1 is sent once turn t completed, its prompt turn t's "
      "prompt + output + --agent-turn-len new user tokens (chat backends: the growing message list); "
      "--request-rate paces conversation starts; ignore_eos is sent; a per-turn TTFT / cached-tokens table "
      "follows the report and is saved as per_turn)");
  cmd->add_option("--dataset-path", o.dataset_path, "Not used: every dataset is synthetic");
  cmd->add_option("--num-prompts,--num-prompt", o.random.num_prompts,
                  "Number of requests (random, prefix_repetition)");
  cmd->add_option("--random-input-len,--random-input,--input-len", o.random.input_len,
                  "Input tokens per request (after the prefix)");
  cmd->add_option("--random-output-len,--random-output", o.random.output_len,
                  "Output tokens per request (max_tokens)");
  a->output_len_opt = unset(cmd->add_option("--output-len", a->output_len,
                                            "Output tokens per request of any dataset (overrides "
                                            "--random-output-len, --prefix-repetition-output-len and "
                                            "--agent-output-len)"));
  cmd->add_option("--random-prefix-len,--random-prefix", o.random.prefix_len,
                  "Tokens of a random prefix shared by every prompt");
  cmd->add_option("--random-range-ratio", o.random.range_ratio,
                  "Lengths are drawn from [len * (1 - r), len * (1 + r)], r in [0, 1)");
  cmd->add_option("--prefix-repetition-prefix-len", o.prefix_repetition.prefix_len,
                  "prefix_repetition: tokens of each shared prefix");
  cmd->add_option("--prefix-repetition-suffix-len", o.prefix_repetition.suffix_len,
                  "prefix_repetition: tokens of random suffix after the prefix, per request");
  cmd->add_option("--prefix-repetition-num-prefixes", o.prefix_repetition.num_prefixes,
                  "prefix_repetition: number of distinct prefixes (at most --num-prompts)");
  cmd->add_option("--prefix-repetition-output-len", o.prefix_repetition.output_len,
                  "prefix_repetition: output tokens per request (max_tokens)");
  cmd->add_option("--agent-conversations", o.agent.conversations,
                  "agent: concurrent conversations (requests in flight are still bounded by "
                  "--max-concurrency)");
  cmd->add_option("--agent-turns", o.agent.turns, "agent: turns per conversation");
  cmd->add_option("--agent-system-len", o.agent.system_len,
                  "agent: tokens of the system prompt every conversation shares (an agent's instructions + "
                  "tools)");
  cmd->add_option("--agent-turn-len", o.agent.turn_len, "agent: tokens of new user text per turn");
  cmd->add_option("--agent-output-len", o.agent.output_len, "agent: output tokens per turn (max_tokens)");
  cmd->add_option("--seed", o.random.seed, "Seed of the dataset and the arrival times");

  cmd->add_option("--request-rate", o.request_rate,
                  "Requests per second (inf: all at once; otherwise Poisson / gamma arrivals)");
  cmd->add_option("--burstiness", o.burstiness,
                  "Gamma shape of the arrival gaps: 1 is Poisson, < 1 burstier, > 1 more uniform");
  a->max_concurrency_opt = unset(cmd->add_option("--max-concurrency", a->max_concurrency,
                                                 "Most requests in flight (default: no limit)"));
  cmd->add_flag(
      "--ignore-eos", o.ignore_eos,
      "Send ignore_eos (always on for the random dataset, as in vLLM, and the agent one; --extra-body "
      "'{\"ignore_eos\": false}' turns it off)");
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)");
  a->top_p_opt = unset(cmd->add_option("--top-p", a->top_p, "top_p (default: not sent)"));
  a->top_k_opt = unset(cmd->add_option("--top-k", a->top_k, "top_k (default: not sent)"));
  a->min_p_opt = unset(cmd->add_option("--min-p", a->min_p, "min_p (default: not sent)"));
  a->frequency_penalty_opt = unset(
      cmd->add_option("--frequency-penalty", a->frequency_penalty, "frequency_penalty (default: not sent)"));
  a->presence_penalty_opt = unset(
      cmd->add_option("--presence-penalty", a->presence_penalty, "presence_penalty (default: not sent)"));
  a->repetition_penalty_opt =
      unset(cmd->add_option("--repetition-penalty", a->repetition_penalty,
                            "repetition_penalty (default: not sent; completions send 1.0, as vLLM)"));
  a->logprobs_opt = unset(cmd->add_option("--logprobs", a->logprobs, "Completions logprobs (default: null)"));
  cmd->add_option("--extra-body", o.extra_body, "JSON object merged into every request body");

  cmd->add_option("--percentile-metrics", o.percentile_metrics,
                  "Metrics to report: ttft, tpot, itl, e2el, client_queue_time, e2el_including_client_queue");
  cmd->add_option("--metric-percentiles", o.metric_percentiles, "Comma-separated percentiles, e.g. 25,50,99");
  list(cmd->add_option("--goodput", o.goodput,
                       "SLOs as KEY:MILLISECONDS (ttft, tpot, e2el) for request goodput"));
  cmd->add_option("--num-warmups", o.num_warmups, "Warm-up requests before the measured run");
  cmd->add_option("--ready-check-timeout-sec", o.ready_check_timeout_sec,
                  "Retry a first test request this long before starting (0: no check)");
  cmd->add_option("--request-id-prefix", o.request_id_prefix,
                  "x-request-id prefix (default: bench-<random>-)");
  cmd->add_flag("--disable-tqdm", o.disable_tqdm, "No progress output on stderr");

  cmd->add_flag("--save-result", o.save_result, "Write the result JSON");
  cmd->add_flag("--append-result", o.append_result, "Append the result JSON as a new line of the file");
  cmd->add_flag("--save-detailed", o.save_detailed,
                "Keep per-request lists in the result (input_lens, output_lens, ttfts, itls, texts, errors)");
  cmd->add_option("--result-dir", o.result_dir, "Directory of the result file (default: current directory)");
  cmd->add_option("--result-filename", o.result_filename,
                  "Result file name (default: {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json)");
  list(cmd->add_option("--metadata", o.metadata, "KEY=VALUE pairs recorded in the result JSON"));

  cmd->callback([a, &exit_code] { exit_code = bench::run_serve_benchmark(a->resolve()); });
}

}  // namespace m3
