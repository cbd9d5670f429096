// Start-up order: validate flags against config.json, bind the port (so a port clash fails fast), start
// answering /health with 503, load weights, tokenizer and chat template, then flip to ready. SIGTERM / SIGINT
// drain: readiness and new requests get 503, in-flight requests get --shutdown-timeout to finish, the rest
// are aborted; a second signal exits at once.
#include "apps/serve_command.h"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/generation_input.h"
#include "apps/rank_launch.h"
#include "apps/serve_options.h"
#include "apps/stats_logger.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/fault.h"
#include "dist/rank_protocol.h"
#include "media/video_decode.h"
#include "server/api_server.h"
#include "tokenizer/tokenizer_config.h"

namespace m3 {
namespace {
namespace fs = std::filesystem;

std::shared_ptr<ServingContext> load_model(const ServeConfig& cfg, const ModelConfig& model,
                                           const std::string& device,
                                           std::shared_ptr<dist::Communicator> comm) {
  fs::path dir = cfg.model_dir;
  if (!fs::exists(dir / "tokenizer.json"))
    fail(ErrorKind::kNotFound, (dir / "tokenizer.json").string() + ": serving needs the model's tokenizer");
  const std::string tmpl =
      cfg.chat_template.empty() ? (dir / "chat_template.jinja").string() : cfg.chat_template;
  if (!fs::exists(tmpl)) fail(ErrorKind::kNotFound, tmpl + ": no chat template (pass --chat-template FILE)");
  const SpecialTokenStrings special = load_special_token_strings(cfg.model_dir);
  auto ctx = std::make_shared<ServingContext>(
      ServingContext{nullptr, Tokenizer::load((dir / "tokenizer.json").string()),
                     chat::ChatTemplate::from_file(tmpl), special.bos, special.eos, MediaModel{}});

  BackendOptions bo;
  bo.device = device;
  bo.script = cfg.scripted_responses;
  bo.comm = std::move(comm);
  const int64_t page = model.msa.block_size;
  const int64_t budget = static_cast<int64_t>(cfg.kv_cache_gb * (1ull << 30) / cpu_kv_bytes_per_page(model));
  const int64_t want_len =
      cfg.engine.max_model_len > 0 ? cfg.engine.max_model_len : model.max_position_embeddings;
  bo.gpu_memory_utilization = cfg.gpu_memory_utilization;
  bo.max_num_batched_tokens = cfg.engine.max_num_batched_tokens;
  bo.max_num_seqs = cfg.engine.max_num_seqs;
  bo.max_model_len = want_len;
  bo.enforce_eager = cfg.enforce_eager;
  bo.load_format = cfg.load_format;
  bo.quantization = cfg.quantization;
  bo.kv_cache_dtype = cfg.kv_cache_dtype;
  bo.expert_parallel = cfg.enable_expert_parallel;
  bo.data_parallel = cfg.data_parallel;
  bo.expert_placement = cfg.expert_placement;
  if (bo.device == "cuda")
    bo.num_kv_pages = cfg.num_kv_pages;  // 0: sized from free GPU memory
  else
    bo.num_kv_pages =
        cfg.num_kv_pages > 0
            ? cfg.num_kv_pages
            : static_cast<int>(std::max<int64_t>(1, std::min(budget, (want_len + page - 1) / page * 4)));
  const size_t page_bytes = kv_bytes_per_page(model, bo.device, bo.kv_cache_dtype);
  bo.num_host_kv_pages =
      static_cast<int>(std::min<double>(cfg.kv_offloading_bytes / double(page_bytes), 1 << 30));
  if (cfg.kv_offloading_bytes > 0 && bo.num_host_kv_pages == 0)
    fail(ErrorKind::kInvalidArgument,
         "--kv-offloading-size is smaller than one KV page (" + std::to_string(page_bytes) + " bytes)");
  std::unique_ptr<ModelBackend> backend = load_backend(cfg.model_dir, bo);
  ctx->media = MediaModel::of(backend->config(), backend->has_vision(), ctx->tokenizer);
  if (ctx->media.enabled) {
    log_info("image input: on (OpenAI image_url parts, Anthropic image blocks)");
    std::string why;
    if (media::video_decoding_available(&why))
      log_info("video input: on (OpenAI video_url parts, decoded with FFmpeg)");
    else
      log_warn("video input unavailable: ", why, " (install libavformat59 libavcodec59 libswscale6)");
  }
  auto engine = std::make_unique<Engine>(std::move(backend), cfg.engine);
  const int pages = engine->stats().kv_pages_total;
  log_info("KV cache: ", pages, " pages of ", page, " tokens (", int64_t{pages} * page,
           " tokens); max model length ", engine->max_model_len());
  if (const int host = engine->stats().host_pages_total; host > 0)
    log_info("KV host tier: ", host, " pages (", int64_t{host} * page, " tokens) of host memory");
  ctx->engine = std::make_unique<AsyncEngine>(std::move(engine), AsyncEngineOptions{cfg.max_pending});
  return ctx;
}

int run_serve(ServeConfig& cfg) {
  cfg.model_dir = resolve_model_dir(cfg.model);
  const ModelConfig model = load_model_config(cfg.model_dir);
  finalize_serve_config(cfg, model);
  const GenerationDefaults generation = load_generation_defaults(cfg.model_dir);
  cfg.server.default_sampling = generation.sampling;
  cfg.server.default_max_tokens = generation.max_new_tokens;
  const std::string device = cfg.scripted_responses.empty() ? resolve_device(cfg.device) : "scripted";
  int rank_exit = 0;
  const auto comm = start_ranks(cfg.launch, device, cfg.model_dir, &rank_exit);
  if (!comm) return rank_exit;  // this process supervised the ranks, or was a worker rank
  // Rank 0 releases the workers when it ends, after the engine (declared after this) has stopped.
  std::optional<dist::WorkerRelease> workers;
  if (*comm) workers.emplace(**comm);

  // Signals are taken by one thread with sigwait, so no handler runs inside library code.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ApiServer server(cfg.server);
  add_admin_routes(server);
  add_openai_routes(server);
  add_anthropic_routes(server);
  if (!server.bind())
    fail(ErrorKind::kInvalidArgument, "--host " + cfg.server.host + " --port " +
                                          std::to_string(cfg.server.port) +
                                          ": cannot listen there (address in use or not local)");
  std::thread http([&] { server.serve(); });
  // A lost rank (dist/fault.h): /health and new requests answer 503 for a moment, then the run ends non-zero.
  dist::set_fault_handler([&server](const std::string& why) {
    log_error("lost a rank: ", why, "; the server stops (/health answers 503)");
    server.begin_drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  struct FaultHandlerReset {
    ~FaultHandlerReset() { dist::set_fault_handler(nullptr); }
  } fault_handler_reset;
  const auto rank_watch = watch_local_ranks(*comm);
  log_info("listening on http://", cfg.server.host, ":", server.port(),
           " (loading the model; /health answers 503)");

  std::shared_ptr<ServingContext> ctx;
  try {
    ctx = load_model(cfg, model, device, *comm);
  } catch (...) {
    server.stop();
    http.join();
    throw;
  }
  server.attach(ctx);
  log_info("ready: serving '", cfg.server.served_model_names[0], "' from ", cfg.model_dir, " on ",
           ctx->engine->config().num_layers, " layers");

  std::optional<StatsLogger> stats;
  if (!cfg.disable_log_stats)
    stats.emplace(*ctx->engine,
                  std::chrono::milliseconds(static_cast<int64_t>(cfg.log_stats_interval_s * 1000)));

  int sig = 0;
  sigwait(&signals, &sig);
  log_info("signal ", sig, ": draining (up to ", cfg.server.shutdown_timeout_s, " s for in-flight requests)");
  server.begin_drain();
  std::atomic<bool> forced{false};
  std::thread second([&] {
    int s2 = 0;
    sigwait(&signals, &s2);
    forced = true;
  });
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(cfg.server.shutdown_timeout_s * 1000));
  // In flight: requests the engine still runs, and answers whose last bytes are still being written.
  auto busy = [&] { return ctx->engine->in_flight() > 0 || server.open_answers() > 0; };
  while (busy() && !forced && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ctx->engine->in_flight() > 0)
    log_warn("aborting ", ctx->engine->in_flight(), " request(s) at shutdown");
  stats.reset();
  ctx->engine->stop();  // aborts what is left; their streams end with finish_reason "abort"
  // The aborted answers end with their abort events; give their writes a moment before the sockets close.
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (server.open_answers() > 0 && std::chrono::steady_clock::now() < flush_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server.stop();
  http.join();
  second.detach();
  log_info("shut down");
  return 0;
}

}  // namespace

void register_serve_command(CLI::App& app, int& exit_code) {
  auto cfg = std::make_shared<ServeConfig>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI- and Anthropic-compatible HTTP server");
  add_serve_flags(*cmd, *cfg);
  cmd->callback([cfg, &exit_code] { exit_code = run_serve(*cfg); });
}

}  // namespace m3
