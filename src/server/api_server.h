// The HTTP front of the routes: routing (exact paths and /v1/models/{id}), API keys, CORS, content type,
// health/readiness and drain, errors in the route's API family's shape for every status (404/405 too), and an
// access log line written when each answer ends (real duration, query string, the error message of a 4xx).
// Transport (framing, limits, timeouts, decompression, connections) is http::Server's; route handlers run on
// a worker pool (cheap admin routes inline on the I/O threads, so /health answers under load). The server
// listens before the model is loaded so /health can answer 503 while loading; attach() publishes the loaded
// model and flips readiness. Route handlers live in *_routes.cc and reach the model through context().
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/api/chat_prompt.h"
#include "chat/template/chat_template.h"
#include "engine/async_engine.h"
#include "grammar/structured_output.h"
#include "http/message.h"
#include "http/server.h"
#include "server/api_error.h"
#include "server/media_input.h"
#include "server/metrics.h"
#include "server/worker_pool.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_names;  // the first is reported by /v1/models; all are accepted
  std::string model_root;                       // /v1/models "root": the path or id the model was loaded from
  std::vector<std::string> api_keys;            // empty: no auth
  std::vector<std::string> allowed_origins;     // CORS; empty: no CORS headers
  http::ServerLimits http;  // body / header limits, timeouts, connection cap, decompression
  int worker_threads = 0;   // route work; 0: the hardware's thread count
  int max_logprobs = 20;
  int max_n = 16;
  int max_stop = 16;
  bool reasoning_parser = false;  // --reasoning-parser minimax_m3
  bool tool_parser = false;       // --tool-call-parser minimax_m3
  bool auto_tool_choice = false;  // --enable-auto-tool-choice
  double shutdown_timeout_s = 30;
  MediaOptions media;               // image inputs: where they may come from, limits
  SamplingParams default_sampling;  // from generation_config.json
  std::optional<int>
      default_max_tokens;  // generation_config.json max_new_tokens; else the rest of the context
};

// Everything the routes need once the model is loaded.
struct ServingContext {
  std::unique_ptr<AsyncEngine> engine;
  Tokenizer tokenizer;
  chat::ChatTemplate chat_template;
  std::string bos_token, eos_token;  // strings the template sees
  MediaModel media;                  // the model's image placeholders and processor (disabled: text only)

  PromptModel prompt_model() const { return {tokenizer, chat_template, bos_token, eos_token}; }
  // Compiled structured-output grammars over this tokenizer's vocabulary, made on first use.
  grammar::GrammarCache& grammar_cache();
  struct GrammarSlot {
    std::once_flag once;
    std::unique_ptr<grammar::GrammarCache> cache;
  };
  std::shared_ptr<GrammarSlot> grammars = std::make_shared<GrammarSlot>();
};

// What a route handler answers: a whole response, or (defer) a body it produces later through the Responder.
class Reply : public http::Response {
 public:
  using Later = std::function<void(std::shared_ptr<http::Responder> out, const http::Headers& headers)>;
  void defer(Later later) { later_ = std::move(later); }
  Later& later() { return later_; }
  std::string error_message;  // an error answer's message, for the access log

 private:
  Later later_;
};

class ApiServer {
 public:
  // Error shape of a route: one API family's, or (kClient, for routes both families call, e.g. /v1/models)
  // Anthropic's when the request carries `anthropic-version`.
  enum class Shape { kOpenAI, kAnthropic, kClient };
  using Handler = std::function<void(const http::Request&, Reply&)>;
  // kInline: cheap and never blocking (health, metrics, models): answered on the I/O thread.
  enum class Run { kWorker, kInline };

  explicit ApiServer(ServerOptions options);
  ~ApiServer();

  bool bind();  // false when the address is unavailable (the caller names the flag)
  int port() const;
  void serve();  // blocks until stop()
  void stop();

  void attach(std::shared_ptr<ServingContext> ctx);  // model loaded: ready
  void begin_drain();                                // SIGTERM: readiness 503, new requests 503
  bool draining() const { return draining_; }
  bool ready() const { return std::atomic_load(&ctx_) != nullptr && !draining_; }
  int open_answers() const { return open_answers_; }  // requests whose answer has not ended

  // For route modules. A pattern ending in '*' matches every path with that prefix.
  void add_route(const char* method, const std::string& pattern, Shape shape, bool needs_auth,
                 Handler handler, Run run = Run::kWorker);
  ServingContext& context() const;  // throws ApiException(503) while loading
  const ServerOptions& options() const { return opt_; }
  Metrics& metrics() { return *metrics_; }
  WorkerPool& workers() { return *workers_; }
  void check_model(const std::optional<std::string>& requested) const;  // 404 for an unknown name
  void send_error(Reply& res, const ApiError& e, Shape shape);

 private:
  struct Route {
    Shape shape;
    bool needs_auth;
    Handler handler;
    Run run;
  };
  class LoggedResponder;
  void dispatch(http::Request&& req, std::shared_ptr<http::Responder> out);
  void answer(const Route& route, const http::Request& req, const std::shared_ptr<LoggedResponder>& out);
  void finish(const std::shared_ptr<LoggedResponder>& out,
              Reply& res);  // sends it, or starts its deferred body
  http::Response transport_error(int status, const std::string& message, const http::Request& req);
  Shape family_of(const http::Request& req) const;  // for errors outside any route
  bool authorized(const http::Request& req) const;

  void housekeeping();  // returns freed heap to the OS once the server goes idle

  ServerOptions opt_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<WorkerPool> workers_;
  std::unique_ptr<http::Server> http_;
  std::shared_ptr<ServingContext> ctx_;
  std::atomic<bool> draining_{false};
  std::atomic<int> open_answers_{0};
  std::atomic<int64_t> answers_ended_{0};
  std::mutex housekeeping_mu_;
  std::condition_variable housekeeping_cv_;
  bool stopping_ = false;
  std::thread housekeeping_thread_;
  std::map<std::string, std::map<std::string, Route>> routes_;  // pattern -> method -> route
};

// Route modules.
void add_admin_routes(
    ApiServer& server);  // /health, /ping, /version, /v1/models, /metrics, /tokenize, /detokenize
void add_openai_routes(ApiServer& server);     // /v1/chat/completions, /v1/completions
void add_anthropic_routes(ApiServer& server);  // /v1/messages, /v1/messages/count_tokens

}  // namespace m3
