// /v1/chat/completions and /v1/completions: request -> prompt ids -> GenerationRuns -> OpenAI JSON or SSE in
// vLLM's shapes (role chunk with the first token, reasoning / tool-call deltas, final chunk with
// finish_reason, optional usage chunk, [DONE]).
#include <set>

#include "chat/api/chat_prompt.h"
#include "server/json_body.h"
#include "server/media_input.h"
#include "server/openai_params.h"
#include "server/sse.h"
#include "server/structured_output_params.h"

namespace m3 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

json usage_json(const std::vector<std::shared_ptr<GenerationRun>>& runs, bool with_reasoning) {
  Usage u;
  for (const auto& r : runs) {
    Usage x = r->usage();
    u.prompt_tokens += x.prompt_tokens;
    u.completion_tokens += x.completion_tokens;
    u.reasoning_tokens += x.reasoning_tokens;
    u.cached_tokens += x.cached_tokens;
  }
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (with_reasoning) j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

// The fields every streamed chunk carries around its choices (usage: null when the usage chunk will follow).
json chunk_envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                    json choices, bool include_usage) {
  json c = {{"id", id},
            {"object", object},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)}};
  if (include_usage) c["usage"] = nullptr;
  return c;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments_json}}}});
  return out;
}

// Accumulates one choice's deltas for a non-streaming response.
struct ChoiceText {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;
  std::string finish_reason;
  json stop_reason;
  void add(const OutputDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.index >= calls.size()) calls.resize(t.index + 1);
      if (!t.id.empty()) calls[t.index].id = t.id;
      if (!t.name.empty()) calls[t.index].name = t.name;
      calls[t.index].arguments_json += t.arguments;
    }
    ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finished) {
      finish_reason = d.finish_reason;
      stop_reason = d.stop_reason;
    }
  }
};

// tool_choice -> (tools passed to the template, whether the tool parser runs).
std::pair<ordered_json, bool> resolve_tools(const ordered_json& body, const ServerOptions& o) {
  ordered_json tools = body.contains("tools") ? body["tools"] : ordered_json();
  if (tools.is_null() || (tools.is_array() && tools.empty())) {
    if (body.contains("tool_choice") && body["tool_choice"].is_object())
      reject("'tool_choice' names a tool but no 'tools' were given", "tool_choice");
    if (body.contains("tool_choice") && body["tool_choice"] == "required")
      reject("'tool_choice' is 'required' but no 'tools' were given", "tool_choice");
    return {ordered_json(), false};
  }
  if (!tools.is_array()) reject("'tools' must be a list", "tools");
  std::set<std::string> names;
  for (const auto& t : tools) {
    const auto& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      reject("every tool needs function.name", "tools");
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      reject("function.parameters must be a JSON schema object", "tools");
    const std::string n = f["name"].get<std::string>();
    if (n.empty() || n.find_first_of("<>\"' \t\n") != std::string::npos || n.find("]<]") != std::string::npos)
      reject("tool name '" + n + "' contains characters that break the tool-call format", "tools");
    if (!names.insert(n).second) reject("duplicate tool name '" + n + "'", "tools");
  }
  ordered_json choice = body.contains("tool_choice") ? body["tool_choice"] : ordered_json("auto");
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c == "none") return {tools, false};
    if (c == "auto") {
      if (!o.tool_parser || !o.auto_tool_choice)
        reject("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
               "tool_choice");
      return {tools, true};
    }
    if (c == "required") {
      if (!o.tool_parser) reject("'tool_choice' needs --tool-call-parser", "tool_choice");
      return {tools, true};
    }
    reject("'tool_choice' must be none, auto, required or a named function", "tool_choice");
  }
  if (!choice.is_object() || !choice.contains("function") || !choice["function"].contains("name"))
    reject("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}",
           "tool_choice");
  const std::string want = choice["function"]["name"].get<std::string>();
  if (!names.count(want))
    reject("'tool_choice' names '" + want + "', which is not in 'tools'", "tool_choice");
  if (!o.tool_parser) reject("'tool_choice' needs --tool-call-parser", "tool_choice");
  ordered_json only = ordered_json::array();
  for (const auto& t : tools)
    if ((t.contains("function") ? t["function"] : t)["name"] == want) only.push_back(t);
  return {only, true};
}

void chat_completions(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  if (!body.contains("messages")) reject("'messages' is required", "messages");
  auto [tools, parse_tools] = resolve_tools(body, server.options());
  const bool add_generation_prompt = opt_bool(body, "add_generation_prompt").value_or(true);
  const ordered_json kwargs = chat_template_kwargs(body);
  const auto budget = opt_int(body, "thinking_token_budget");
  if (budget && (*budget < 0 || *budget > INT32_MAX))
    reject("'thinking_token_budget' must be a non-negative integer", "thinking_token_budget");

  GenerationSpec spec;
  if (body.contains("prompt_token_ids")) {  // TensorRT-LLM's benchmark sends token ids to the chat endpoint
    if (budget)  // where reasoning starts is read from the rendered prompt, which token ids skip
      reject("'thinking_token_budget' needs 'messages', not 'prompt_token_ids'", "thinking_token_budget");
    const auto& p = body["prompt_token_ids"];
    if (!p.is_array() || p.empty())
      reject("'prompt_token_ids' must be a non-empty list of token ids", "prompt_token_ids");
    for (const auto& t : p) {
      if (!t.is_number_integer()) reject("'prompt_token_ids' must hold integers", "prompt_token_ids");
      spec.request.prompt.push_back(t.get<int32_t>());
    }
  } else {
    const bool media = has_media_parts(body["messages"]);
    ChatPrompt prompt = render_chat_prompt(ctx.prompt_model(), body["messages"], tools, add_generation_prompt,
                                           kwargs, /*allow_media=*/media);
    spec.request.prompt = std::move(prompt.ids);
    if (media)
      spec.request.mm =
          attach_media(body["messages"], spec.request.prompt, ctx.media, server.options().media);
    if (server.options().reasoning_parser) spec.text.reasoning = prompt.thinking;
    if (parse_tools) spec.text.tools = json::parse(prompt.tools.dump());
    if (budget)
      spec.request.thinking_budget =
          thinking_budget(ctx.tokenizer, static_cast<int>(*budget), prompt.thinking);
  }
  StreamOptions stream;
  parse_openai_sampling(body, server, /*chat=*/true, spec, stream);
  // Structured output: response_format & co, or a forced tool choice (the tool-call markup, arguments
  // following the tools' schemas).
  const char* format_field = "";
  std::optional<grammar::StructuredOutputSpec> format = openai_output_format(body, &format_field);
  const ordered_json& choice = body.contains("tool_choice") ? body["tool_choice"] : ordered_json();
  if (parse_tools && (choice == "required" || choice.is_object())) {
    if (format)
      reject("a forced 'tool_choice' cannot be combined with a structured output format", "tool_choice");
    format = forced_tool_call(tools, choice.is_object() ? choice["function"]["name"].get<std::string>() : "",
                              opt_bool(body, "parallel_tool_calls").value_or(true));
    format_field = "tools";
  } else if (parse_tools && !format) {  // auto: strict tools' calls follow their schemas
    format = strict_tool_calls(tools, opt_bool(body, "parallel_tool_calls").value_or(true));
    format_field = "tools";
  }
  if (format)
    attach_grammar(ctx, *format, spec.text.reasoning.value_or(ThinkingStart::kStartsInContent),
                   spec.text.reasoning.has_value(), format_field, spec);
  const int top_logprobs = spec.request.sampling.logprobs;
  const bool reasoning = spec.text.reasoning.has_value();

  auto run = std::make_shared<GenerationRun>(server, spec);
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_time();
  const std::string model = server.options().served_model_names[0];
  const Tokenizer tok = ctx.tokenizer;

  if (stream.stream) {
    auto started = std::make_shared<std::vector<bool>>(spec.n, false);
    auto chunk = [=](json choices) {
      return chunk_envelope(id, "chat.completion.chunk", created, model, std::move(choices),
                            stream.include_usage);
    };
    respond_with_runs(
        res, "text/event-stream", {run},
        [=](size_t, int choice, OutputDelta& d) {
          std::string out;
          if (!(*started)[choice] && (!d.token_ids.empty() || d.finished)) {
            (*started)[choice] = true;
            out += sse_data(chunk(json::array({{{"index", choice},
                                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                {"logprobs", nullptr},
                                                {"finish_reason", nullptr}}})));
          }
          json delta = json::object();
          if (!d.reasoning.empty()) delta["reasoning_content"] = delta["reasoning"] = d.reasoning;
          if (!d.content.empty()) delta["content"] = d.content;
          if (!d.tool_calls.empty()) {
            json calls = json::array();
            for (const ToolCallDelta& t : d.tool_calls) {
              json c = {{"index", t.index}, {"function", {{"arguments", t.arguments}}}};
              if (!t.id.empty()) {
                c["id"] = t.id;
                c["type"] = "function";
                c["function"]["name"] = t.name;
              }
              calls.push_back(c);
            }
            delta["tool_calls"] = calls;
          }
          json lp = top_logprobs >= 0 && !d.token_ids.empty()
                        ? chat_logprobs_json(tok, d.token_ids, d.logprobs, top_logprobs)
                        : json(nullptr);
          if (!delta.empty() || (!lp.is_null())) {
            out += sse_data(chunk(json::array(
                {{{"index", choice}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}}})));
          }
          if (d.finished)
            out += sse_data(chunk(json::array({{{"index", choice},
                                                {"delta", json::object()},
                                                {"logprobs", nullptr},
                                                {"finish_reason", d.finish_reason},
                                                {"stop_reason", d.stop_reason}}})));
          return out;
        },
        [=] {
          std::string out;
          if (stream.include_usage) {
            json u = {{"id", id},
                      {"object", "chat.completion.chunk"},
                      {"created", created},
                      {"model", model},
                      {"choices", json::array()},
                      {"usage", usage_json({run}, reasoning)}};
            out += sse_data(u);
          }
          return out + "data: [DONE]\n\n";
        });
    return;
  }

  auto texts = std::make_shared<std::vector<ChoiceText>>(spec.n);
  respond_with_runs(
      res, "application/json", {run},
      [texts](size_t, int choice, OutputDelta& d) {
        (*texts)[choice].add(d);
        return std::string();
      },
      [=] {
        json choices = json::array();
        for (int i = 0; i < static_cast<int>(texts->size()); ++i) {
          const ChoiceText& t = (*texts)[i];
          json msg = {{"role", "assistant"}};
          msg["content"] = t.content.empty() && !t.calls.empty() ? json(nullptr) : json(t.content);
          if (reasoning)
            msg["reasoning_content"] = msg["reasoning"] =
                t.reasoning.empty() ? json(nullptr) : json(t.reasoning);
          if (!t.calls.empty()) msg["tool_calls"] = tool_calls_json(t.calls);
          choices.push_back(
              {{"index", i},
               {"message", msg},
               {"logprobs",
                top_logprobs >= 0 ? chat_logprobs_json(tok, t.ids, t.logprobs, top_logprobs) : json(nullptr)},
               {"finish_reason", t.finish_reason},
               {"stop_reason", t.stop_reason}});
        }
        json r = {{"id", id},
                  {"object", "chat.completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", choices},
                  {"usage", usage_json({run}, reasoning)},
                  {"system_fingerprint", nullptr}};
        return r.dump();
      });
}

// A completions prompt: a string, a list of ids, or a batch of either.
std::vector<std::vector<int32_t>> completion_prompts(const ordered_json& body, const Tokenizer& tok,
                                                     int vocab) {
  if (!body.contains("prompt") || body["prompt"].is_null()) reject("'prompt' is required", "prompt");
  const auto& p = body["prompt"];
  auto ids_of = [&](const ordered_json& list) {
    std::vector<int32_t> ids;
    for (const auto& t : list) {
      if (!t.is_number_integer()) reject("'prompt' token lists must hold integers", "prompt");
      int64_t v = t.get<int64_t>();
      if (v < 0 || v >= vocab)
        reject("'prompt' token id " + std::to_string(v) + " is outside the vocabulary [0, " +
                   std::to_string(vocab) + ")",
               "prompt");
      ids.push_back(static_cast<int32_t>(v));
    }
    if (ids.empty()) reject("'prompt' must not be empty", "prompt");
    return ids;
  };
  auto text_of = [&](const ordered_json& s) {
    std::vector<int32_t> ids = tok.encode(s.get<std::string>());
    if (ids.empty()) reject("'prompt' must not be empty", "prompt");
    return ids;
  };
  std::vector<std::vector<int32_t>> out;
  if (p.is_string()) {
    out.push_back(text_of(p));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    out.push_back(ids_of(p));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string())
        out.push_back(text_of(e));
      else if (e.is_array())
        out.push_back(ids_of(e));
      else
        reject("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
    }
  } else {
    reject("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
  }
  return out;
}

json completion_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& ids,
                              const std::vector<TokenLogprobs>& lps, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    std::string t = tok.decode(std::vector<int32_t>{ids[i]});
    tokens.push_back(t);
    token_lps.push_back(lps[i].logprob);
    json top = json::object();
    for (const auto& [id, lp] : lps[i].top) top[tok.decode(std::vector<int32_t>{id})] = lp;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += t.size();
  }
  return {
      {"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

void completions(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  if (opt_bool(body, "echo").value_or(false)) reject("'echo' is not supported", "echo");
  if (opt_string(body, "suffix")) reject("'suffix' is not supported", "suffix");
  const auto prompts = completion_prompts(body, ctx.tokenizer, ctx.engine->config().vocab_size);

  std::vector<std::shared_ptr<GenerationRun>> runs;
  StreamOptions stream;
  int n = 1, logprobs = -1;
  const char* format_field = "";
  const std::optional<grammar::StructuredOutputSpec> format = openai_output_format(body, &format_field);
  for (const auto& ids : prompts) {
    GenerationSpec spec;
    spec.request.prompt = ids;
    parse_openai_sampling(body, server, /*chat=*/false, spec, stream);
    if (format) attach_grammar(ctx, *format, ThinkingStart::kStartsInContent, false, format_field, spec);
    n = spec.n;
    logprobs = spec.request.sampling.logprobs;
    runs.push_back(std::make_shared<GenerationRun>(server, spec));
  }
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_time();
  const std::string model = server.options().served_model_names[0];
  const Tokenizer tok = ctx.tokenizer;

  if (stream.stream) {
    auto offsets = std::make_shared<std::vector<size_t>>(runs.size() * n, 0);
    auto chunk = [=](json choices) {
      return chunk_envelope(id, "text_completion", created, model, std::move(choices), stream.include_usage);
    };
    respond_with_runs(
        res, "text/event-stream", runs,
        [=](size_t r, int choice, OutputDelta& d) {
          const size_t index = r * n + choice;
          if (d.content.empty() && !d.finished && d.token_ids.empty()) return std::string();
          json lp = logprobs >= 0 ? completion_logprobs_json(tok, d.token_ids, d.logprobs, (*offsets)[index])
                                  : json(nullptr);
          (*offsets)[index] += d.content.size();
          json c = {{"index", index},
                    {"text", d.content},
                    {"logprobs", lp},
                    {"finish_reason", d.finished ? json(d.finish_reason) : json(nullptr)},
                    {"stop_reason", d.finished ? d.stop_reason : json(nullptr)}};
          return sse_data(chunk(json::array({c})));
        },
        [=] {
          std::string out;
          if (stream.include_usage)
            out += sse_data({{"id", id},
                             {"object", "text_completion"},
                             {"created", created},
                             {"model", model},
                             {"choices", json::array()},
                             {"usage", usage_json(runs, false)}});
          return out + "data: [DONE]\n\n";
        });
    return;
  }
  auto texts = std::make_shared<std::vector<ChoiceText>>(runs.size() * n);
  respond_with_runs(
      res, "application/json", runs,
      [=](size_t r, int choice, OutputDelta& d) {
        (*texts)[r * n + choice].add(d);
        return std::string();
      },
      [=] {
        json choices = json::array();
        for (size_t i = 0; i < texts->size(); ++i) {
          const ChoiceText& t = (*texts)[i];
          choices.push_back({{"index", i},
                             {"text", t.content},
                             {"logprobs", logprobs >= 0 ? completion_logprobs_json(tok, t.ids, t.logprobs, 0)
                                                        : json(nullptr)},
                             {"finish_reason", t.finish_reason},
                             {"stop_reason", t.stop_reason}});
        }
        return json({{"id", id},
                     {"object", "text_completion"},
                     {"created", created},
                     {"model", model},
                     {"choices", choices},
                     {"usage", usage_json(runs, false)}})
            .dump();
      });
}

}  // namespace

void add_openai_routes(ApiServer& server) {
  server.add_route("POST", "/v1/chat/completions", ApiServer::Shape::kOpenAI, true,
                   [&server](const http::Request& q, Reply& r) { chat_completions(server, q, r); });
  server.add_route("POST", "/v1/completions", ApiServer::Shape::kOpenAI, true,
                   [&server](const http::Request& q, Reply& r) { completions(server, q, r); });
}

}  // namespace m3
