// Route wrapper: CORS, auth, content type, error rendering in the route's shape and response metrics. Bodies
// over the limit are refused by cpp-httplib (413) before they are read.
#include "server/api_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>

#include "common/log.h"

namespace m3 {
namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

ApiServer::ApiServer(ServerOptions options)
    : opt_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      metrics_(std::make_unique<Metrics>(opt_.served_model_names.empty() ? "" : opt_.served_model_names[0])) {
  const int workers = opt_.max_connections;
  http_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  http_->set_keep_alive_max_count(1000);
  // Debian's cpp-httplib is a compiled library whose listen() uses a backlog of 5, so a burst of connections
  // (a benchmark's or an agent's fan-out) overflows the accept queue and clients sit in SYN retransmission
  // back-off for seconds to minutes. The listening socket is remembered here and bind() re-listens on it
  // with a real backlog. SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a second
  // server silently share the port instead of failing with "address in use").
  http_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a route already wrote its error
    if (res.status == 404) {        // a known path with another method: 405 naming the allowed ones
      auto it = allow_.find(req.path);
      if (it != allow_.end()) {
        res.status = 405;
        res.set_header("Allow", it->second);
        res.set_content(openai_error_body(api_error(405, req.method + " is not allowed on " + req.path +
                                                             "; use " + it->second))
                            .dump(),
                        "application/json");
        return;
      }
    }
    ApiError e =
        res.status == 404 ? api_error(404, "no route for " + req.method + " " + req.path)
        : res.status == 413
            ? api_error(413, "request body exceeds " + std::to_string(opt_.max_body_bytes) + " bytes")
            : api_error(res.status, "HTTP error " + std::to_string(res.status));
    res.set_content(openai_error_body(e).dump(), "application/json");
  });
  // Header caps (landscape.md §4.9 row 5): cpp-httplib bounds each header line (8 KiB: its own 400) but
  // neither their number nor their total size.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    size_t bytes = 0;
    for (const auto& [k, v] : req.headers) bytes += k.size() + v.size() + 4;
    if (req.headers.size() <= 100 && bytes <= 32768) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 431;
    res.set_header("Connection", "close");
    res.set_content(
        openai_error_body(api_error(431, "request headers too large (at most 100 headers, 32 KiB)")).dump(),
        "application/json");
    metrics_->http_response(431);
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->Options(".*", [this](const httplib::Request&, httplib::Response& res) {
    if (!opt_.allowed_origins.empty()) {
      res.set_header("Access-Control-Allow-Origin", opt_.allowed_origins[0]);
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "*");
    }
    res.status = 200;
  });
}

ApiServer::~ApiServer() {
  stop();
}

bool ApiServer::bind() {
  if (opt_.port == 0) {
    int p = http_->bind_to_any_port(opt_.host);
    if (p <= 0) return false;
    opt_.port = p;
  } else if (!http_->bind_to_port(opt_.host, opt_.port)) {
    return false;
  }
  // Linux updates the backlog of a socket that is already listening (capped by net.core.somaxconn).
  return ::listen(listen_socket_, kListenBacklog) == 0;
}

int ApiServer::port() const {
  return opt_.port;
}
void ApiServer::serve() {
  http_->listen_after_bind();
}
void ApiServer::stop() {
  if (http_) http_->stop();
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

bool ApiServer::authorized(const httplib::Request& req) const {
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

void ApiServer::send_error(httplib::Response& res, const ApiError& e, Shape shape) {
  res.status = e.status;
  if (e.retry_after >= 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  if (e.status == 503 && draining_) res.set_header("Connection", "close");
  const auto body = shape == Shape::kAnthropic ? anthropic_error_body(e) : openai_error_body(e);
  res.set_content(body.dump(), "application/json");
  if (e.status >= 500) log_warn("HTTP ", e.status, ": ", e.message);
}

void ApiServer::add_route(const char* method, const std::string& pattern, Shape shape, bool needs_auth,
                          Handler handler) {
  auto wrapped = [this, shape, needs_auth, handler](const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    if (!opt_.allowed_origins.empty()) res.set_header("Access-Control-Allow-Origin", opt_.allowed_origins[0]);
    const std::string request_id = req.get_header_value("X-Request-Id");
    if (!request_id.empty() && request_id.size() <= 256)
      res.set_header("X-Request-Id", request_id);  // echoed
    try {
      if (needs_auth && !authorized(req)) throw ApiException{api_error(401, "invalid or missing API key")};
      if (req.method == "POST") {
        const std::string ct = req.get_header_value("Content-Type");
        if (!ct.empty() && ct.find("application/json") == std::string::npos)
          throw ApiException{api_error(415, "Content-Type must be application/json, got '" + ct + "'")};
      }
      handler(req, res);
    } catch (const ApiException& e) {
      send_error(res, e.error, shape);
    } catch (const Error& e) {
      send_error(res, api_error_from(e), shape);
    } catch (const std::exception& e) {
      send_error(res, api_error(500, std::string("internal error: ") + e.what()), shape);
    }
    // cpp-httplib fills in 200 after the handler when a route left the status unset (streamed responses).
    const int status = res.status == -1 ? 200 : res.status;
    metrics_->http_response(status);
    // Access log: for streamed responses the status and time are those of the response head (first byte).
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    log_fields(LogLevel::kInfo, "http",
               {{"method", req.method},
                {"path", req.path},
                {"status", std::to_string(status)},
                {"ms", std::to_string(static_cast<int64_t>(ms))},
                {"client", req.remote_addr},
                {"request_id", request_id}});
  };
  std::string& allow = allow_[pattern];
  allow += (allow.empty() ? "" : ", ") + std::string(method);
  if (std::string(method) == "GET")
    http_->Get(pattern, wrapped);
  else
    http_->Post(pattern, wrapped);
}

}  // namespace m3
