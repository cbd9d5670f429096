// /v1/messages and /v1/messages/count_tokens (Anthropic Messages API, as vLLM serves it): content blocks
// (text, thinking, tool_use, tool_result) become OpenAI-shaped messages for the chat template;
// `thinking.type` becomes the template's thinking_mode. Output goes through the same GenerationRun /
// OutputProcessor as the OpenAI routes and is rendered as thinking / text / tool_use blocks, or as
// Anthropic's SSE event sequence.
#include <map>

#include "chat/api/anthropic_request.h"
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

// Anthropic's usage: cache_read_input_tokens are the prompt tokens read from the prefix cache,
// cache_creation_input_tokens the ones this request wrote to it and had kept (cache_control), input_tokens
// the rest.
json usage_of(int prompt_tokens, const Usage& u) {
  return {{"input_tokens", prompt_tokens - u.cached_tokens - u.cache_written_tokens},
          {"cache_creation_input_tokens", u.cache_written_tokens},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", u.completion_tokens}};
}

std::string stop_reason_of(const std::string& finish) {
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls") return "tool_use";
  return "end_turn";
}

// Builds the content blocks of a finished (non-streaming) message.
struct MessageText {
  std::string thinking, text;
  std::vector<ToolCall> calls;
  std::string finish;
  json stop;
};

void messages(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  // Message threads (the SDK's tool runner asks for one by default) are held by Anthropic's servers; this one
  // keeps no conversation between requests. The SDK's own error code makes the runner resend the whole
  // history without a thread, once.
  if (body.contains("thread") && !body["thread"].is_null() && body["thread"] != false) {
    ApiError e = api_error(
        400, "message threads are not supported by this server: send the whole conversation", "thread");
    e.details = {{"error_code", "thread_unsupported_request"}, {"unsupported", {"thread"}}};
    throw ApiException{e};
  }
  auto max_tokens = opt_int(body, "max_tokens");
  if (!max_tokens) reject("'max_tokens' is required", "max_tokens");
  if (*max_tokens < 1) reject("'max_tokens' must be at least 1", "max_tokens");
  const AnthropicChat conv = convert_anthropic_request(body);
  if (conv.thinking_budget && *max_tokens <= *conv.thinking_budget)
    reject("`max_tokens` must be greater than `thinking.budget_tokens`", "max_tokens");
  const bool media = has_media_parts(conv.messages);
  ChatPrompt prompt = render_chat_prompt(ctx.prompt_model(), conv.messages, conv.tools, true, conv.kwargs,
                                         /*allow_media=*/media);

  GenerationSpec spec;
  if (media) spec.request.mm = attach_media(conv.messages, prompt.ids, ctx.media, server.options().media);
  spec.request.prompt = prompt.ids;
  const int64_t max_len = ctx.engine->max_model_len();
  // Anthropic's wording: agents (Claude Code) parse it to retry with a smaller max_tokens.
  if (static_cast<int64_t>(prompt.ids.size()) + *max_tokens > max_len)
    reject("input length and `max_tokens` exceed context limit: " + std::to_string(prompt.ids.size()) +
               " + " + std::to_string(*max_tokens) + " > " + std::to_string(max_len) +
               ", decrease input length or `max_tokens` and try again",
           "max_tokens");
  spec.request.max_tokens = static_cast<int>(*max_tokens);
  spec.request.cache_keep_seconds = conv.cache_ttl_seconds;
  if (conv.thinking_budget)
    spec.request.thinking_budget = thinking_budget(ctx.tokenizer, *conv.thinking_budget, prompt.thinking);
  SamplingParams& s = spec.request.sampling;
  s = server.options().default_sampling;
  parse_basic_sampling(body, s);
  spec.text.stop = string_or_list(body, "stop_sequences", static_cast<size_t>(server.options().max_stop));
  if (server.options().reasoning_parser) spec.text.reasoning = prompt.thinking;
  if (conv.tools.is_array() && conv.tool_choice != "none" && server.options().tool_parser)
    spec.text.tools = json::parse(prompt.tools.dump());
  // Structured output: output_config.format, or tool_choice any / tool (the tool-call markup, arguments
  // following the tools' input schemas).
  std::optional<grammar::StructuredOutputSpec> format = anthropic_output_format(body);
  const char* format_field = "output_config.format";
  if ((conv.tool_choice == "any" || conv.tool_choice == "tool") && conv.tools.is_array()) {
    if (format) reject("a forced 'tool_choice' cannot be combined with an output format", "tool_choice");
    if (!server.options().tool_parser) reject("'tool_choice' needs --tool-call-parser", "tool_choice");
    const ordered_json& tc = body["tool_choice"];
    const bool parallel =
        !(tc.contains("disable_parallel_tool_use") && tc["disable_parallel_tool_use"] == true);
    const bool named = conv.tool_choice == "tool" && tc.contains("name") && tc["name"].is_string();
    format = forced_tool_call(conv.tools, named ? tc["name"].get<std::string>() : "", parallel);
    format_field = "tools";
  } else if (!format && conv.tool_choice == "auto" && conv.tools.is_array() && server.options().tool_parser) {
    format = strict_tool_calls(body["tools"], true);  // strict tools' calls follow their schemas
    format_field = "tools";
  }
  if (format)
    attach_grammar(ctx, *format, spec.text.reasoning.value_or(ThinkingStart::kStartsInContent),
                   spec.text.reasoning.has_value(), format_field, spec);
  const bool stream = opt_bool(body, "stream").value_or(false);

  auto run = std::make_shared<GenerationRun>(server, spec);
  const std::string id = random_id("msg_", 24);
  const std::string model = server.options().served_model_names[0];
  const int prompt_tokens = static_cast<int>(prompt.ids.size());

  if (stream) {
    // Open block: -1 none, else its index; kind tells whether it is thinking, text or a tool call.
    struct State {
      int next_index = 0, open = -1;
      std::string kind;
      std::map<size_t, int> tool_block;  // tool call index -> block index
      bool started = false;
    };
    auto st = std::make_shared<State>();
    auto start = [=] {
      return sse_event("message_start", {{"type", "message_start"},
                                         {"message",
                                          {{"id", id},
                                           {"type", "message"},
                                           {"role", "assistant"},
                                           {"model", model},
                                           {"content", json::array()},
                                           {"stop_reason", nullptr},
                                           {"stop_sequence", nullptr},
                                           {"usage", usage_of(prompt_tokens, Usage{})}}}});
    };
    auto close = [st] {
      if (st->open < 0) return std::string();
      std::string out;
      if (st->kind == "thinking")
        out += sse_event("content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", st->open},
                          {"delta", {{"type", "signature_delta"}, {"signature", random_id("", 32)}}}});
      out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", st->open}});
      st->open = -1;
      st->kind.clear();
      return out;
    };
    auto open = [st, close](const std::string& kind, json block) {
      std::string out = close();
      st->open = st->next_index++;
      st->kind = kind;
      out += sse_event("content_block_start",
                       {{"type", "content_block_start"}, {"index", st->open}, {"content_block", block}});
      return out;
    };
    res.set_header("anthropic-version", "2023-06-01");
    respond_with_runs(
        res, "text/event-stream", {run},
        [=](size_t, int, OutputDelta& d) {
          std::string out;
          if (!st->started) {
            st->started = true;
            out += start();
          }
          if (!d.reasoning.empty()) {
            if (st->kind != "thinking") out += open("thinking", {{"type", "thinking"}, {"thinking", ""}});
            out += sse_event("content_block_delta",
                             {{"type", "content_block_delta"},
                              {"index", st->open},
                              {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
          }
          if (!d.content.empty()) {
            if (st->kind != "text") out += open("text", {{"type", "text"}, {"text", ""}});
            out +=
                sse_event("content_block_delta", {{"type", "content_block_delta"},
                                                  {"index", st->open},
                                                  {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
          }
          for (const ToolCallDelta& t : d.tool_calls) {
            if (!st->tool_block.count(t.index)) {
              out += open("tool_use",
                          {{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", json::object()}});
              st->tool_block[t.index] = st->open;
            }
            if (!t.arguments.empty())
              out += sse_event("content_block_delta",
                               {{"type", "content_block_delta"},
                                {"index", st->tool_block[t.index]},
                                {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
          }
          if (d.finished) {
            out += close();
            out +=
                sse_event("message_delta",
                          {{"type", "message_delta"},
                           {"delta",
                            {{"stop_reason",
                              d.stop_reason.is_string() ? "stop_sequence" : stop_reason_of(d.finish_reason)},
                             {"stop_sequence", d.stop_reason.is_string() ? d.stop_reason : json(nullptr)}}},
                           {"usage", usage_of(prompt_tokens, run->usage())}});
          }
          return out;
        },
        [] {
          return sse_event("message_stop", {{"type", "message_stop"}});
        });
    return;
  }

  auto msg = std::make_shared<MessageText>();
  respond_with_runs(
      res, "application/json", {run},
      [msg](size_t, int, OutputDelta& d) {
        msg->thinking += d.reasoning;
        msg->text += d.content;
        for (const ToolCallDelta& t : d.tool_calls) {
          if (t.index >= msg->calls.size()) msg->calls.resize(t.index + 1);
          if (!t.id.empty()) msg->calls[t.index].id = t.id;
          if (!t.name.empty()) msg->calls[t.index].name = t.name;
          msg->calls[t.index].arguments_json += t.arguments;
        }
        if (d.finished) {
          msg->finish = d.finish_reason;
          msg->stop = d.stop_reason;
        }
        return std::string();
      },
      [=] {
        json content = json::array();
        if (!msg->thinking.empty())
          content.push_back(
              {{"type", "thinking"}, {"thinking", msg->thinking}, {"signature", random_id("", 32)}});
        if (!msg->text.empty()) content.push_back({{"type", "text"}, {"text", msg->text}});
        for (const ToolCall& c : msg->calls) {
          json input = json::parse(c.arguments_json, nullptr, false);
          content.push_back({{"type", "tool_use"},
                             {"id", c.id},
                             {"name", c.name},
                             {"input", input.is_discarded() ? json::object() : input}});
        }
        const bool stop_seq = msg->stop.is_string();
        json r = {{"id", id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model},
                  {"content", content},
                  {"stop_reason", stop_seq ? "stop_sequence" : stop_reason_of(msg->finish)},
                  {"stop_sequence", stop_seq ? msg->stop : json(nullptr)},
                  {"usage", usage_of(prompt_tokens, run->usage())}};
        return r.dump();
      });
}

void count_tokens(ApiServer& server, const http::Request& req, Reply& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  const AnthropicChat conv = convert_anthropic_request(body);
  const bool media = has_media_parts(conv.messages);
  ChatPrompt prompt = render_chat_prompt(server.context().prompt_model(), conv.messages, conv.tools, true,
                                         conv.kwargs, /*allow_media=*/media);
  if (media) attach_media(conv.messages, prompt.ids, server.context().media, server.options().media);
  res.set_content(json({{"input_tokens", prompt.ids.size()}}).dump(), "application/json");
}

}  // namespace

void add_anthropic_routes(ApiServer& server) {
  server.add_route("POST", "/v1/messages", ApiServer::Shape::kAnthropic, true,
                   [&server](const http::Request& q, Reply& r) { messages(server, q, r); });
  server.add_route("POST", "/v1/messages/count_tokens", ApiServer::Shape::kAnthropic, true,
                   [&server](const http::Request& q, Reply& r) { count_tokens(server, q, r); });
}

}  // namespace m3
