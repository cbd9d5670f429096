// Routing and the route wrapper (CORS, auth, content type, errors in the route's shape), the access log and
// response metrics at the end of each answer, and the transport's refusals in the request's API family's
// shape.
#include "server/api_server.h"

#include <malloc.h>

#include <chrono>
#include <mutex>

#include "common/log.h"

namespace m3 {
namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

bool is_prefix_pattern(const std::string& pattern) {
  return !pattern.empty() && pattern.back() == '*';
}

// One access-log line: `http method=... path=... status=...` then whichever optional fields are set.
void log_access(const std::string& method, const std::string& path, int status, const std::string& client,
                LogFields optional) {
  LogFields fields = {
      {"method", method}, {"path", path}, {"status", std::to_string(status)}, {"client", client}};
  for (auto& f : optional)
    if (!f.second.empty()) fields.push_back(std::move(f));
  log_fields(LogLevel::kInfo, "http", fields);
}

}  // namespace

// Forwards to the transport's Responder and, when the answer ends (sent, stream ended or the client gone),
// counts it and writes the access log line with the request's real duration.
class ApiServer::LoggedResponder : public http::Responder,
                                   public std::enable_shared_from_this<LoggedResponder> {
 public:
  static std::shared_ptr<LoggedResponder> make(ApiServer& server, std::shared_ptr<http::Responder> inner,
                                               const http::Request& req) {
    auto r = std::shared_ptr<LoggedResponder>(new LoggedResponder(server, std::move(inner), req));
    std::weak_ptr<LoggedResponder> weak = r;
    r->inner_->on_close([weak] {
      if (auto self = weak.lock()) self->peer_closed();
    });
    return r;
  }
  ~LoggedResponder() override { complete(false); }

  void send(http::Response res) override {
    status_ = res.status;
    inner_->send(std::move(res));
    complete(false);
  }
  void start_stream(int status, http::Headers headers, std::string content_type) override {
    status_ = status;
    inner_->start_stream(status, std::move(headers), std::move(content_type));
  }
  bool write(std::string data) override { return inner_->write(std::move(data)); }
  void end() override {
    inner_->end();
    complete(false);
  }
  void on_close(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!closed_) {
        on_close_ = std::move(fn);
        return;
      }
    }
    fn();
  }
  bool closed() const override { return inner_->closed(); }
  void set_error(std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(message);
  }

 private:
  LoggedResponder(ApiServer& server, std::shared_ptr<http::Responder> inner, const http::Request& req)
      : server_(server),
        inner_(std::move(inner)),
        method_(req.method),
        path_(req.path),
        query_(req.query),
        client_(req.remote_addr),
        request_id_(req.get_header_value("X-Request-Id")),
        start_(std::chrono::steady_clock::now()) {
    ++server_.open_answers_;
  }

  void peer_closed() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      fn = std::move(on_close_);
    }
    if (fn) fn();
    complete(true);
  }

  void complete(bool client_left) {
    if (done_.exchange(true)) return;
    --server_.open_answers_;
    ++server_.answers_ended_;
    const int status = status_.load() > 0 ? status_.load() : 500;
    server_.metrics().http_response(status);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    std::string error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = error_;
    }
    log_access(method_, path_, status, client_,
               {{"ms", std::to_string(static_cast<int64_t>(ms))},
                {"query", query_},
                {"request_id", request_id_},
                {"error", error},
                {"closed", client_left ? "client went away before the answer ended" : ""}});
  }

  ApiServer& server_;
  std::shared_ptr<http::Responder> inner_;
  const std::string method_, path_, query_, client_, request_id_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<int> status_{0};
  std::string error_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  bool closed_ = false;
  std::function<void()> on_close_;
};

ApiServer::ApiServer(ServerOptions options)
    : opt_(std::move(options)),
      metrics_(std::make_unique<Metrics>(opt_.served_model_names.empty() ? "" : opt_.served_model_names[0])),
      workers_(std::make_unique<WorkerPool>(opt_.worker_threads)),
      housekeeping_thread_([this] { housekeeping(); }) {
  http_ = std::make_unique<http::Server>(
      opt_.http,
      [this](http::Request&& req, std::shared_ptr<http::Responder> out) { dispatch(std::move(req), out); },
      [this](int status, const std::string& message, const http::Request& req) {
        return transport_error(status, message, req);
      });
}

ApiServer::~ApiServer() {
  stop();
  {
    std::lock_guard<std::mutex> lock(housekeeping_mu_);
    stopping_ = true;
  }
  housekeeping_cv_.notify_all();
  housekeeping_thread_.join();
}

// A burst of thousands of streams leaves the freed memory of their buffers in glibc's per-thread arenas;
// without a trim the process would keep that resident set after the burst. Once a second, when answers have
// ended since the last look and none is open, the free pages go back to the OS.
void ApiServer::housekeeping() {
  int64_t seen = 0;
  std::unique_lock<std::mutex> lock(housekeeping_mu_);
  while (!housekeeping_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    const int64_t ended = answers_ended_;
    if (ended == seen || open_answers_ > 0) continue;
    seen = ended;
    malloc_trim(0);
  }
}

bool ApiServer::bind() {
  if (!http_->bind(opt_.host, opt_.port)) return false;
  opt_.port = http_->port();
  return true;
}

int ApiServer::port() const {
  return opt_.port;
}
void ApiServer::serve() {
  http_->run();
}
void ApiServer::stop() {
  if (http_) http_->stop();
}

grammar::GrammarCache& ServingContext::grammar_cache() {
  std::call_once(grammars->once, [&] {
    const auto& eos = engine->config().eos_token_ids;
    auto vocab = grammar::Vocabulary::from_tokenizer(tokenizer, std::vector<int32_t>(eos.begin(), eos.end()));
    // The tool-call markup's tags are single special tokens the model writes.
    std::vector<int32_t> specials;
    for (const char* tag : {"<tool_call>", "</tool_call>", "]<]minimax[>["})
      if (const auto id = tokenizer.token_to_id(tag)) specials.push_back(*id);
    grammars->cache = std::make_unique<grammar::GrammarCache>(std::move(vocab), std::move(specials));
  });
  return *grammars->cache;
}

void ApiServer::attach(std::shared_ptr<ServingContext> ctx) {
  std::atomic_store(&ctx_, std::move(ctx));
}

void ApiServer::begin_drain() {
  draining_ = true;
  auto ctx = std::atomic_load(&ctx_);
  if (ctx) ctx->engine->begin_drain();
}

ServingContext& ApiServer::context() const {
  auto ctx = std::atomic_load(&ctx_);
  if (!ctx) {
    ApiError e = api_error(503, "the model is still loading");
    e.type = "unavailable_error";
    throw ApiException{e};
  }
  return *ctx;
}

void ApiServer::check_model(const std::optional<std::string>& requested) const {
  if (!requested) return;
  for (const auto& n : opt_.served_model_names)
    if (n == *requested) return;
  if (*requested == opt_.model_root) return;
  throw ApiException{api_error(404, "The model `" + *requested + "` does not exist.", "model")};
}

bool ApiServer::authorized(const http::Request& req) const {
  if (opt_.api_keys.empty()) return true;
  std::string presented;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0)
    presented = auth.substr(7);
  else if (req.has_header("x-api-key"))
    presented = req.get_header_value("x-api-key");
  bool ok = false;
  for (const auto& k : opt_.api_keys) ok |= constant_time_equal(presented, k);
  return ok;
}

ApiServer::Shape ApiServer::family_of(const http::Request& req) const {
  return req.path.rfind("/v1/messages", 0) == 0 || req.has_header("anthropic-version") ? Shape::kAnthropic
                                                                                       : Shape::kOpenAI;
}

void ApiServer::send_error(Reply& res, const ApiError& e, Shape shape) {
  res.status = e.status;
  if (e.retry_after >= 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  if (e.status == 503 && draining_) res.set_header("Connection", "close");
  const auto body = shape == Shape::kAnthropic ? anthropic_error_body(e) : openai_error_body(e);
  res.set_content(body.dump(), "application/json");
  res.error_message = e.message;
  if (e.status >= 500) log_warn("HTTP ", e.status, ": ", e.message);
}

http::Response ApiServer::transport_error(int status, const std::string& message, const http::Request& req) {
  Reply res;
  send_error(res, api_error(status, message), family_of(req));
  metrics_->http_response(status);
  log_access(req.method, req.path, status, req.remote_addr, {{"query", req.query}, {"error", message}});
  return std::move(static_cast<http::Response&>(res));
}

void ApiServer::add_route(const char* method, const std::string& pattern, Shape shape, bool needs_auth,
                          Handler handler, Run run) {
  routes_[pattern][method] = Route{shape, needs_auth, std::move(handler), run};
}

void ApiServer::dispatch(http::Request&& req, std::shared_ptr<http::Responder> raw) {
  auto out = LoggedResponder::make(*this, std::move(raw), req);
  if (req.method == "OPTIONS") {  // CORS preflight
    Reply res;
    res.status = 204;
    if (!opt_.allowed_origins.empty()) {
      res.set_header("Access-Control-Allow-Origin", opt_.allowed_origins[0]);
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "*");
    }
    finish(out, res);
    return;
  }
  const std::map<std::string, Route>* methods = nullptr;
  auto exact = routes_.find(req.path);
  if (exact != routes_.end() && !is_prefix_pattern(exact->first)) methods = &exact->second;
  for (auto it = routes_.begin(); !methods && it != routes_.end(); ++it)
    if (is_prefix_pattern(it->first) && req.path.size() >= it->first.size() &&
        req.path.compare(0, it->first.size() - 1, it->first, 0, it->first.size() - 1) == 0)
      methods = &it->second;
  Reply res;
  if (!methods) {
    send_error(res, api_error(404, "no route for " + req.method + " " + req.path), family_of(req));
  } else if (auto m = methods->find(req.method); m == methods->end()) {
    std::string allow;
    for (const auto& [name, route] : *methods) allow += (allow.empty() ? "" : ", ") + name;
    const Shape shape =
        methods->begin()->second.shape == Shape::kAnthropic ? Shape::kAnthropic : family_of(req);
    send_error(res, api_error(405, req.method + " is not allowed on " + req.path + "; use " + allow), shape);
    res.set_header("Allow", allow);
  } else {
    const Route& route = m->second;
    if (route.run == Run::kInline) {
      answer(route, req, out);
    } else {
      workers_->post([this, &route, req = std::move(req), out] { answer(route, req, out); });
    }
    return;
  }
  finish(out, res);
}

void ApiServer::answer(const Route& route, const http::Request& req,
                       const std::shared_ptr<LoggedResponder>& out) {
  const Shape shape = route.shape != Shape::kClient ? route.shape : family_of(req);
  Reply res;
  if (!opt_.allowed_origins.empty()) res.set_header("Access-Control-Allow-Origin", opt_.allowed_origins[0]);
  const std::string request_id = req.get_header_value("X-Request-Id");
  if (!request_id.empty() && request_id.size() <= 256) res.set_header("X-Request-Id", request_id);  // echoed
  try {
    if (route.needs_auth && !authorized(req))
      throw ApiException{api_error(401, "invalid or missing API key")};
    if (req.method == "POST") {
      const std::string ct = req.get_header_value("Content-Type");
      if (!ct.empty() && ct.find("application/json") == std::string::npos)
        throw ApiException{api_error(415, "Content-Type must be application/json, got '" + ct + "'")};
    }
    route.handler(req, res);
  } catch (const ApiException& e) {
    send_error(res, e.error, shape);
  } catch (const Error& e) {
    send_error(res, api_error_from(e), shape);
  } catch (const std::exception& e) {
    send_error(res, api_error(500, std::string("internal error: ") + e.what()), shape);
  }
  finish(out, res);
}

void ApiServer::finish(const std::shared_ptr<LoggedResponder>& out, Reply& res) {
  if (res.later() && res.error_message.empty()) {  // the body comes later (an error replaces it)
    Reply::Later later = std::move(res.later());
    later(out, res.headers);
    return;
  }
  out->set_error(res.error_message);
  out->send(std::move(static_cast<http::Response&>(res)));
}

}  // namespace m3
