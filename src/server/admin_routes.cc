// Operational and utility endpoints: /health (503 while loading or draining), /ping, /version, /v1/models,
// /metrics (Prometheus), /tokenize and /detokenize (vLLM's shapes; prompt text or chat messages).
#include "chat/api/chat_prompt.h"
#include "server/api_server.h"
#include "server/json_body.h"
#include "server/openai_params.h"

namespace m3 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

void health(ApiServer& server, const http::Request&, Reply& res) {
  if (server.ready()) {
    res.status = 200;
    return;
  }
  ApiError e =
      api_error(503, server.draining() ? "the server is shutting down" : "the model is still loading");
  e.type = "unavailable_error";
  server.send_error(res, e, ApiServer::Shape::kOpenAI);
}

// One served model, in OpenAI's shape or, for a client that sends `anthropic-version`, Anthropic's.
json model_entry(const ServerOptions& o, const std::string& name, int64_t max_len, bool anthropic) {
  if (anthropic)
    return {{"type", "model"}, {"id", name}, {"display_name", name}, {"created_at", "1970-01-01T00:00:00Z"}};
  return {{"id", name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "m3serve"},
          {"root", o.model_root},
          {"parent", nullptr},
          {"max_model_len", max_len},
          {"permission", json::array()}};
}

int64_t loaded_max_len(ApiServer& server) {
  try {
    return server.context().engine->max_model_len();
  } catch (const ApiException&) {
    return 0;  // unknown while loading
  }
}

void models(ApiServer& server, const http::Request& req, Reply& res) {
  const ServerOptions& o = server.options();
  const bool anthropic = req.has_header("anthropic-version");
  const int64_t max_len = loaded_max_len(server);
  json data = json::array();
  for (const std::string& name : o.served_model_names)
    data.push_back(model_entry(o, name, max_len, anthropic));
  json body = {{"object", "list"}, {"data", data}};
  if (anthropic)
    body = {{"data", data},
            {"has_more", false},
            {"first_id", o.served_model_names.front()},
            {"last_id", o.served_model_names.back()}};
  res.set_content(body.dump(), "application/json");
}

// GET /v1/models/{id}: a served name (or the path it was loaded from), else 404 in the client's shape.
void model(ApiServer& server, const http::Request& req, Reply& res) {
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  const bool anthropic = req.has_header("anthropic-version");
  server.check_model(id);
  res.set_content(model_entry(server.options(), id, loaded_max_len(server), anthropic).dump(),
                  "application/json");
}

void tokenize(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  json out;
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    const ordered_json tools = body.contains("tools") ? body["tools"] : ordered_json();
    const ordered_json kwargs = chat_template_kwargs(body);
    ChatPrompt p = render_chat_prompt(ctx.prompt_model(), body["messages"], tools,
                                      opt_bool(body, "add_generation_prompt").value_or(true), kwargs,
                                      /*allow_media=*/true);
    ids = std::move(p.ids);
    out["prompt"] = p.text;
  } else {
    auto prompt = opt_string(body, "prompt");
    if (!prompt) reject("'prompt' or 'messages' is required", "prompt");
    ids = ctx.tokenizer.encode(*prompt);
  }
  out["count"] = ids.size();
  out["max_model_len"] = ctx.engine->max_model_len();
  out["tokens"] = ids;
  if (opt_bool(body, "return_token_strs").value_or(false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(ctx.tokenizer.id_to_token(id));
    out["token_strs"] = strs;
  }
  res.set_content(out.dump(), "application/json");
}

void detokenize(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  if (!body.contains("tokens") || !body["tokens"].is_array())
    reject("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.engine->config().vocab_size)
      reject("'tokens' must hold token ids in [0, " + std::to_string(ctx.engine->config().vocab_size) + ")",
             "tokens");
    ids.push_back(t.get<int32_t>());
  }
  res.set_content(json({{"prompt", ctx.tokenizer.decode(ids)}}).dump(), "application/json");
}

}  // namespace

void add_admin_routes(ApiServer& server) {
  using S = ApiServer::Shape;
  auto bind = [&server](void (*f)(ApiServer&, const http::Request&, Reply&)) {
    return [&server, f](const http::Request& q, Reply& r) { f(server, q, r); };
  };
  // Inline: cheap, never blocking, so they answer on the I/O threads even when the workers are busy.
  const auto I = ApiServer::Run::kInline;
  server.add_route("GET", "/health", S::kOpenAI, false, bind(health), I);
  server.add_route("GET", "/ping", S::kOpenAI, false, bind(health), I);
  server.add_route(
      "GET", "/version", S::kOpenAI, false,
      [](const http::Request&, Reply& r) { r.set_content(R"({"version":"0.1.0"})", "application/json"); }, I);
  server.add_route("GET", "/v1/models", S::kClient, true, bind(models), I);
  // vLLM's POST /reset_prefix_cache: the cached pages no request holds are dropped at the next step.
  server.add_route(
      "POST", "/reset_prefix_cache", S::kOpenAI, true,
      [&server](const http::Request&, Reply& r) {
        server.context().engine->reset_prefix_cache();
        r.set_content("", "text/plain");
      },
      I);
  server.add_route("GET", "/v1/models/*", S::kClient, true, bind(model), I);
  server.add_route(
      "GET", "/metrics", S::kOpenAI, false,
      [&server](const http::Request&, Reply& r) {
        EngineStats stats{};  // zeros while loading; live while draining too
        try {
          stats = server.context().engine->stats();
        } catch (const ApiException&) {
        }
        r.set_content(server.metrics().render(stats), "text/plain; version=0.0.4");
      },
      I);
  server.add_route("POST", "/tokenize", S::kOpenAI, false, bind(tokenize));
  server.add_route("POST", "/detokenize", S::kOpenAI, false, bind(detokenize));
}

}  // namespace m3
