// /v1/messages and /v1/messages/count_tokens (Anthropic Messages API, as vLLM serves it): content blocks
// (text, thinking, tool_use, tool_result) become OpenAI-shaped messages for the chat template;
// `thinking.type` becomes the template's thinking_mode. Output goes through the same GenerationRun /
// OutputProcessor as the OpenAI routes and is rendered as thinking / text / tool_use blocks, or as
// Anthropic's SSE event sequence.
#include <httplib.h>

#include <set>

#include "server/chat_prompt.h"
#include "server/json_body.h"
#include "server/openai_params.h"
#include "server/sse.h"

namespace m3 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string block_text(const ordered_json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(where + " must be a string or a list of content blocks", "messages");
  std::string text;
  for (const auto& b : content) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      reject(where + " may only hold text blocks here", "messages");
    text += b["text"].get<std::string>();
  }
  return text;
}

struct Converted {
  ordered_json messages = ordered_json::array();
  ordered_json tools;  // OpenAI-shaped, null when none
  ordered_json kwargs = ordered_json::object();
  bool parse_tools = false;
};

Converted convert_request(const ordered_json& body, const ServerOptions& opt) {
  Converted c;
  if (body.contains("system") && !body["system"].is_null()) {
    std::string sys;
    if (body["system"].is_string()) {
      sys = body["system"].get<std::string>();
    } else if (body["system"].is_array()) {
      for (const auto& b : body["system"]) {
        if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text"))
          reject("'system' blocks must be text blocks", "system");
        const std::string t = b["text"].get<std::string>();
        if (t.rfind("x-anthropic-billing-header", 0) == 0) continue;  // per-request header Claude Code sends
        sys += (sys.empty() ? "" : "\n") + t;
      }
    } else {
      reject("'system' must be a string or a list of text blocks", "system");
    }
    c.messages.push_back({{"role", "system"}, {"content", sys}});
  }
  if (!body.contains("messages") || !body["messages"].is_array())
    reject("'messages' is required", "messages");
  if (body["messages"].empty()) reject("'messages' must not be empty", "messages");
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const auto& m = body["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m.contains("content"))
      reject(where + " needs role and content", "messages");
    const std::string role = m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role != "user" && role != "assistant") reject(where + ".role must be user or assistant", "messages");
    const auto& content = m["content"];
    if (content.is_string()) {
      c.messages.push_back({{"role", role}, {"content", content}});
      continue;
    }
    if (!content.is_array()) reject(where + ".content must be a string or a list of blocks", "messages");
    ordered_json msg = {{"role", role}};
    std::string text, thinking;
    ordered_json calls = ordered_json::array();
    for (size_t k = 0; k < content.size(); ++k) {
      const auto& b = content[k];
      const std::string bw = where + ".content[" + std::to_string(k) + "]";
      const std::string type =
          b.is_object() && b.contains("type") && b["type"].is_string() ? b["type"].get<std::string>() : "";
      if (type == "text") {
        text += block_text(ordered_json::array({b}), bw);
      } else if (type == "thinking" && role == "assistant") {
        thinking += b.value("thinking", "");
      } else if (type == "redacted_thinking" && role == "assistant") {
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) reject(bw + " tool_use needs a name", "messages");
        calls.push_back(
            {{"id", b.value("id", "")},
             {"type", "function"},
             {"function",
              {{"name", b["name"]}, {"arguments", b.contains("input") ? b["input"].dump() : "{}"}}}});
      } else if (type == "tool_result" && role == "user") {
        std::string result = b.contains("content") ? block_text(b["content"], bw + ".content") : "";
        c.messages.push_back(
            {{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")}, {"content", result}});
      } else if (type == "image" || type == "document") {
        reject(bw + ": " + type + " input is not supported by this server (text only)", "messages");
      } else {
        reject(bw + ": content block type '" + type + "' is not supported in a " + role + " message",
               "messages");
      }
    }
    if (role == "user" && text.empty()) continue;  // only tool results
    msg["content"] = text;
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    c.messages.push_back(msg);
  }

  if (body.contains("tools") && !body["tools"].is_null() && !body["tools"].is_array())
    reject("'tools' must be a list", "tools");
  const bool has_tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
  if (!has_tools && body.contains("tool_choice") && body["tool_choice"].is_object()) {
    const std::string t = body["tool_choice"].value("type", "auto");
    if (t == "any" || t == "tool")
      reject("'tool_choice' is '" + t + "' but no 'tools' were given", "tool_choice");
  }
  if (has_tools) {
    c.tools = ordered_json::array();
    std::set<std::string> names;
    for (const auto& t : body["tools"]) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        reject("every tool needs a name", "tools");
      const std::string n = t["name"].get<std::string>();
      if (n.empty() || n.find_first_of("<>\"' \t\n") != std::string::npos ||
          n.find("]<]") != std::string::npos)
        reject("tool name '" + n + "' contains characters that break the tool-call format", "tools");
      if (!names.insert(n).second) reject("duplicate tool name '" + n + "'", "tools");
      if (t.contains("input_schema") && !t["input_schema"].is_object())
        reject("tool '" + n + "': input_schema must be a JSON schema object", "tools");
      if (t.contains("type") && t["type"].is_string() && t["type"] != "custom" && !t.contains("input_schema"))
        reject("server tool '" + t["type"].get<std::string>() + "' is not supported", "tools");
      c.tools.push_back(
          {{"type", "function"},
           {"function",
            {{"name", t["name"]},
             {"description", t.value("description", "")},
             {"parameters", t.contains("input_schema") ? t["input_schema"] : ordered_json::object()}}}});
    }
    std::string choice = "auto";
    if (body.contains("tool_choice") && body["tool_choice"].is_object())
      choice = body["tool_choice"].value("type", "auto");
    if (choice == "tool") {
      const std::string want = body["tool_choice"].value("name", "");
      ordered_json only = ordered_json::array();
      for (const auto& t : c.tools)
        if (t["function"]["name"] == want) only.push_back(t);
      if (only.empty()) reject("'tool_choice' names '" + want + "', which is not in 'tools'", "tool_choice");
      c.tools = only;
    } else if (choice != "auto" && choice != "any" && choice != "none") {
      reject("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
    }
    c.parse_tools = choice != "none" && opt.tool_parser;
  }
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
    c.kwargs = body["chat_template_kwargs"];
  if (body.contains("thinking") && body["thinking"].is_object()) {
    const std::string t = body["thinking"].value("type", "");
    if (t != "enabled" && t != "disabled" && t != "adaptive")
      reject("'thinking.type' must be enabled, disabled or adaptive", "thinking");
    c.kwargs["thinking_mode"] = t;
  }
  return c;
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

void messages(ApiServer& server, const httplib::Request& req, httplib::Response& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  ServingContext& ctx = server.context();
  auto max_tokens = opt_int(body, "max_tokens");
  if (!max_tokens) reject("'max_tokens' is required", "max_tokens");
  if (*max_tokens < 1) reject("'max_tokens' must be at least 1", "max_tokens");
  Converted conv = convert_request(body, server.options());
  ChatPrompt prompt = render_chat_prompt(ctx, conv.messages, conv.tools, true, conv.kwargs);

  GenerationSpec spec;
  spec.request.prompt = prompt.ids;
  const int64_t max_len = ctx.engine->max_model_len();
  if (static_cast<int64_t>(prompt.ids.size()) + *max_tokens > max_len)
    reject("prompt (" + std::to_string(prompt.ids.size()) + " tokens) + max_tokens (" +
               std::to_string(*max_tokens) + ") exceeds the context length " + std::to_string(max_len),
           "max_tokens");
  spec.request.max_tokens = static_cast<int>(*max_tokens);
  SamplingParams& s = spec.request.sampling;
  s = server.options().default_sampling;
  parse_basic_sampling(body, s);
  spec.text.stop = string_or_list(body, "stop_sequences", static_cast<size_t>(server.options().max_stop));
  if (server.options().reasoning_parser) spec.text.reasoning = prompt.thinking;
  if (conv.parse_tools) spec.text.tools = json::parse(prompt.tools.dump());
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
      return sse_event("message_start",
                       {{"type", "message_start"},
                        {"message",
                         {{"id", id},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"model", model},
                          {"content", json::array()},
                          {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}});
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
            out += sse_event(
                "message_delta",
                {{"type", "message_delta"},
                 {"delta",
                  {{"stop_reason",
                    d.stop_reason.is_string() ? "stop_sequence" : stop_reason_of(d.finish_reason)},
                   {"stop_sequence", d.stop_reason.is_string() ? d.stop_reason : json(nullptr)}}},
                 {"usage",
                  {{"input_tokens", prompt_tokens}, {"output_tokens", run->usage().completion_tokens}}}});
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
        json r = {
            {"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", content},
            {"stop_reason", stop_seq ? "stop_sequence" : stop_reason_of(msg->finish)},
            {"stop_sequence", stop_seq ? msg->stop : json(nullptr)},
            {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", run->usage().completion_tokens}}}};
        return r.dump();
      });
}

void count_tokens(ApiServer& server, const httplib::Request& req, httplib::Response& res) {
  const ordered_json body = parse_json_object(req.body);
  server.check_model(opt_string(body, "model"));
  Converted conv = convert_request(body, server.options());
  ChatPrompt prompt = render_chat_prompt(server.context(), conv.messages, conv.tools, true, conv.kwargs);
  res.set_content(json({{"input_tokens", prompt.ids.size()}}).dump(), "application/json");
}

}  // namespace

void add_anthropic_routes(ApiServer& server) {
  server.add_route("POST", "/v1/messages", ApiServer::Shape::kAnthropic, true,
                   [&server](const httplib::Request& q, httplib::Response& r) { messages(server, q, r); });
  server.add_route(
      "POST", "/v1/messages/count_tokens", ApiServer::Shape::kAnthropic, true,
      [&server](const httplib::Request& q, httplib::Response& r) { count_tokens(server, q, r); });
}

}  // namespace m3
