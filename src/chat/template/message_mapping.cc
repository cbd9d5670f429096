// OpenAI -> template message mapping and vLLM's content-format detection (see message_mapping.h). The
// detection walks the parsed template the way vLLM walks Jinja's AST, so templates vLLM treats as "openai"
// get the same list-of-parts content here and the rendered prompts (and prefix caches) agree.
#include "chat/template/message_mapping.h"

#include <deque>
#include <string>
#include <vector>

#include "common/error.h"

namespace m3::chat {

using nlohmann::ordered_json;

namespace {

using jinja::Body;
using jinja::Expr;
using jinja::ExprKind;
using jinja::Stmt;
using jinja::StmtKind;

void collect(const Body& body, std::vector<const Stmt*>& sets, std::vector<const Stmt*>& loops) {
  for (const auto& st : body) {
    if (st->kind == StmtKind::kSet) sets.push_back(st.get());
    if (st->kind == StmtKind::kFor) loops.push_back(st.get());
    collect(st->body, sets, loops);
    collect(st->else_body, sets, loops);
    if (st->macro) collect(st->macro->body, sets, loops);
  }
}

bool is_var(const Expr& e, const std::string& var) {
  return e.kind == ExprKind::kName && e.name == var;
}

bool is_attr(const Expr& e, const std::string& var, const std::string& key) {
  if (e.kind == ExprKind::kGetitem)
    return is_var(*e.a, var) && e.b->kind == ExprKind::kConst && e.b->value.is_string() &&
           e.b->value.str() == key;
  if (e.kind == ExprKind::kGetattr) return is_var(*e.a, var) && e.name == key;
  return false;
}

// vLLM's _is_var_or_elems_access: looks through filters, tests and slices.
bool is_var_or_elems(const Expr& e, const std::string& var, const std::string* key) {
  if (e.kind == ExprKind::kFilter) return e.a && is_var_or_elems(*e.a, var, key);
  if (e.kind == ExprKind::kTest) return is_var_or_elems(*e.a, var, key);
  if (e.kind == ExprKind::kGetitem && e.b->kind == ExprKind::kSlice) return is_var_or_elems(*e.a, var, key);
  return key ? is_attr(e, var, *key) : is_var(e, var);
}

}  // namespace

ContentFormat detect_content_format(const Body& body) {
  std::vector<const Stmt*> sets, loops;
  collect(body, sets, loops);
  std::vector<std::string> messages_vars = {"messages"};
  std::deque<std::string> queue = {"messages"};
  while (!queue.empty()) {
    std::string var = queue.front();
    queue.pop_front();
    for (const Stmt* s : sets) {
      if (!is_var_or_elems(*s->expr, var, nullptr)) continue;
      if (s->target.kind != jinja::Target::Kind::kName) return ContentFormat::kString;  // vLLM's assert fails
      messages_vars.push_back(s->target.name);
      if (s->target.name != var && messages_vars.size() < 1000) queue.push_back(s->target.name);
    }
  }
  std::vector<std::string> message_vars;
  for (const Stmt* loop : loops) {
    for (const auto& var : messages_vars) {
      if (!is_var_or_elems(*loop->expr, var, nullptr)) continue;
      if (loop->target.kind != jinja::Target::Kind::kName) return ContentFormat::kString;
      message_vars.push_back(loop->target.name);
      break;
    }
  }
  const std::string content = "content";
  for (const Stmt* loop : loops)
    for (const auto& var : message_vars)
      if (is_var_or_elems(*loop->expr, var, &content)) return ContentFormat::kOpenAI;
  return ContentFormat::kString;
}

namespace {

[[noreturn]] void bad(size_t index, const std::string& what) {
  fail(ErrorKind::kInvalidArgument, "messages[" + std::to_string(index) + "]: " + what);
}

ordered_json map_part(const ordered_json& part, size_t index, ContentFormat format,
                      std::vector<std::string>& texts) {
  auto text_part = [&](const std::string& text) {
    texts.push_back(text);
    return ordered_json{{"type", "text"}, {"text", text}};
  };
  if (part.is_string()) {
    // vLLM keeps a bare string part as a string, even in "openai" format.
    texts.push_back(part.get<std::string>());
    return part;
  }
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
    bad(index, "each content part must be an object with a string \"type\"");
  const std::string type = part["type"].get<std::string>();
  if (type == "text" || type == "input_text" || type == "output_text" || type == "thinking") {
    if (!part.contains("text") || !part["text"].is_string())
      bad(index, "a text part needs a string \"text\"");
    return text_part(part["text"].get<std::string>());
  }
  if (type == "refusal") {
    if (!part.contains("refusal") || !part["refusal"].is_string())
      bad(index, "a refusal part needs \"refusal\"");
    return text_part(part["refusal"].get<std::string>());
  }
  std::string media;
  if (type == "image_url" || type == "input_image" || type == "image" || type == "image_pil" ||
      type == "image_embeds") {
    media = "image";
  } else if (type == "video_url" || type == "video") {
    media = "video";
  } else if (type == "input_audio" || type == "audio_url" || type == "audio") {
    media = "audio";
  } else {
    bad(index, "unknown content part type '" + type + "'");
  }
  if (format == ContentFormat::kString)
    fail(ErrorKind::kUnsupported, "messages[" + std::to_string(index) + "]: " + media +
                                      " content is not supported with this chat template");
  return ordered_json{{"type", media}};
}

ordered_json map_content(const ordered_json& msg, size_t index, ContentFormat format) {
  ordered_json parts = ordered_json::array();
  std::vector<std::string> texts;
  auto it = msg.find("content");
  if (it != msg.end() && !it->is_null()) {
    if (it->is_string()) {
      ordered_json wrapped = {{"type", "text"}, {"text", *it}};
      parts.push_back(map_part(wrapped, index, format, texts));
    } else if (it->is_array()) {
      for (const auto& part : *it) parts.push_back(map_part(part, index, format, texts));
    } else {
      bad(index, "\"content\" must be a string, an array of parts or null");
    }
  }
  if (format == ContentFormat::kOpenAI) return parts;
  std::string joined;
  for (size_t k = 0; k < texts.size(); ++k) {
    if (k) joined += '\n';
    joined += texts[k];
  }
  return joined;
}

ordered_json map_tool_calls(const ordered_json& calls, size_t index) {
  if (!calls.is_array()) bad(index, "\"tool_calls\" must be an array");
  ordered_json out = calls;
  for (auto& call : out) {
    if (!call.is_object()) bad(index, "each tool call must be an object");
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null() || (args->is_string() && args->get<std::string>().empty())) {
      (*fn)["arguments"] = ordered_json::object();
    } else if (args->is_string()) {
      ordered_json parsed = ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) *args = std::move(parsed);
    }
  }
  return out;
}

}  // namespace

ordered_json normalize_messages(const ordered_json& messages, ContentFormat format) {
  if (!messages.is_array()) fail(ErrorKind::kInvalidArgument, "\"messages\" must be an array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& msg = messages[i];
    if (!msg.is_object()) bad(i, "must be an object");
    auto role_it = msg.find("role");
    if (role_it == msg.end() || !role_it->is_string()) bad(i, "\"role\" must be a string");
    const std::string role = role_it->get<std::string>();
    ordered_json m = ordered_json::object();
    m["role"] = role;
    m["content"] = map_content(msg, i, format);
    if (role == "assistant") {
      auto calls = msg.find("tool_calls");
      if (calls != msg.end() && !calls->is_null()) m["tool_calls"] = map_tool_calls(*calls, i);
      // vLLM: `message.get("reasoning") or message.get("reasoning_content")`, stored under both names.
      ordered_json reasoning;
      auto r = msg.find("reasoning");
      if (r != msg.end() && !r->is_null() && !(r->is_string() && r->get<std::string>().empty()))
        reasoning = *r;
      if (reasoning.is_null()) {
        auto rc = msg.find("reasoning_content");
        if (rc != msg.end()) reasoning = *rc;
      }
      if (!reasoning.is_null()) {
        m["reasoning"] = reasoning;
        m["reasoning_content"] = reasoning;
      }
    } else if (role == "tool") {
      auto id = msg.find("tool_call_id");
      if (id != msg.end()) m["tool_call_id"] = *id;
    }
    auto name = msg.find("name");
    if (name != msg.end() && name->is_string()) m["name"] = *name;
    out.push_back(std::move(m));
  }
  return out;
}

ordered_json normalize_tools(const ordered_json& tools) {
  if (tools.is_null()) return tools;
  if (!tools.is_array()) fail(ErrorKind::kInvalidArgument, "\"tools\" must be an array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& tool = tools[i];
    std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) fail(ErrorKind::kInvalidArgument, where + " must be an object");
    auto fn_it = tool.find("function");
    if (fn_it == tool.end() || !fn_it->is_object())
      fail(ErrorKind::kInvalidArgument, where + " needs a \"function\" object");
    const ordered_json& fn = *fn_it;
    auto name = fn.find("name");
    if (name == fn.end() || !name->is_string())
      fail(ErrorKind::kInvalidArgument, where + ".function needs a string \"name\"");
    ordered_json f = ordered_json::object();
    f["name"] = *name;
    f["description"] = fn.contains("description") ? fn["description"] : ordered_json();
    f["parameters"] = fn.contains("parameters") ? fn["parameters"] : ordered_json();
    for (auto it = fn.begin(); it != fn.end(); ++it)
      if (it.key() != "name" && it.key() != "description" && it.key() != "parameters")
        f[it.key()] = it.value();
    ordered_json t = ordered_json::object();
    t["type"] = tool.contains("type") ? tool["type"] : ordered_json("function");
    t["function"] = std::move(f);
    for (auto it = tool.begin(); it != tool.end(); ++it)
      if (it.key() != "type" && it.key() != "function") t[it.key()] = it.value();
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace m3::chat
