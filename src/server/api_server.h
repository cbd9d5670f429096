// The HTTP front: routing, API keys, body limits, CORS, health/readiness and drain, over cpp-httplib with one
// worker thread per connection (bounded). The server listens before the model is loaded so /health can answer
// 503 while loading; attach() publishes the loaded model and flips readiness. Route handlers live in
// *_routes.cc and reach the model through context().
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/template/chat_template.h"
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace m3 {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_names;  // the first is reported by /v1/models; all are accepted
  std::string model_root;                       // /v1/models "root": the path or id the model was loaded from
  std::vector<std::string> api_keys;            // empty: no auth
  std::vector<std::string> allowed_origins;     // CORS; empty: no CORS headers
  size_t max_body_bytes = 32u << 20;
  int max_connections = 1024;  // worker threads
  int max_logprobs = 20;
  int max_n = 16;
  int max_stop = 16;
  bool reasoning_parser = false;  // --reasoning-parser minimax_m3
  bool tool_parser = false;       // --tool-call-parser minimax_m3
  bool auto_tool_choice = false;  // --enable-auto-tool-choice
  double shutdown_timeout_s = 30;
  SamplingParams default_sampling;  // from generation_config.json
};

// Everything the routes need once the model is loaded.
struct ServingContext {
  std::unique_ptr<AsyncEngine> engine;
  Tokenizer tokenizer;
  chat::ChatTemplate chat_template;
  std::string bos_token, eos_token;  // strings the template sees
};

class ApiServer {
 public:
  enum class Shape { kOpenAI, kAnthropic };
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit ApiServer(ServerOptions options);
  ~ApiServer();

  bool bind();  // false when the address is unavailable (the caller names the flag)
  int port() const;
  void serve();  // blocks until stop()
  void stop();

  void attach(std::shared_ptr<ServingContext> ctx);  // model loaded: ready
  void begin_drain();                                // SIGTERM: readiness 503, new requests 503
  bool draining() const { return draining_; }
  bool ready() const { return ctx_ != nullptr && !draining_; }

  // For route modules.
  void add_route(const char* method, const std::string& pattern, Shape shape, bool needs_auth,
                 Handler handler);
  ServingContext& context() const;  // throws ApiException(503) while loading
  const ServerOptions& options() const { return opt_; }
  Metrics& metrics() { return *metrics_; }
  void check_model(const std::optional<std::string>& requested) const;  // 404 for an unknown name
  void send_error(httplib::Response& res, const ApiError& e, Shape shape);

 private:
  bool authorized(const httplib::Request& req) const;

  static constexpr int kListenBacklog = 4096;
  int listen_socket_ = -1;  // set while binding

  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Metrics> metrics_;
  std::shared_ptr<ServingContext> ctx_;
  std::atomic<bool> draining_{false};
  std::map<std::string, std::string> allow_;  // route path -> its methods ("GET, POST"), for 405 + Allow
};

// Route modules.
void add_admin_routes(
    ApiServer& server);  // /health, /ping, /version, /v1/models, /metrics, /tokenize, /detokenize
void add_openai_routes(ApiServer& server);     // /v1/chat/completions, /v1/completions
void add_anthropic_routes(ApiServer& server);  // /v1/messages, /v1/messages/count_tokens

}  // namespace m3
