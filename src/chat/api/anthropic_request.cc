// Block-by-block conversion; every error names the message / block / field it is about.
#include "chat/api/anthropic_request.h"

#include <algorithm>
#include <functional>
#include <set>

#include "common/error.h"

namespace m3 {
namespace {

using nlohmann::ordered_json;

// Claude Code puts a per-request billing header first in its system blocks; it changes every request.
bool volatile_block(const std::string& text) {
  return text.rfind("x-anthropic-billing-header", 0) == 0;
}

std::string block_text(const ordered_json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail_field(where + " must be a string or a list of content blocks", "messages");
  std::string text;
  for (const auto& b : content) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      fail_field(where + " may only hold text blocks here", "messages");
    text += b["text"].get<std::string>();
  }
  return text;
}

// The text of a system prompt (`system`, or the content of a role "system" entry): a string or text blocks,
// joined by newlines, volatile blocks left out.
std::string system_text(const ordered_json& content, const std::string& where, const std::string& field) {
  if (content.is_string())
    return volatile_block(content.get<std::string>()) ? "" : content.get<std::string>();
  if (!content.is_array()) fail_field(where + " must be a string or a list of text blocks", field);
  std::string text;
  for (const auto& b : content) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      fail_field(where + " blocks must be text blocks", field);
    const std::string t = b["text"].get<std::string>();
    if (volatile_block(t)) continue;
    text += (text.empty() ? "" : "\n") + t;
  }
  return text;
}

// Appends inline system text to the conversation so far: into the last user / tool message when the
// conversation ends with one, else it waits (`pending`) for the next user or tool message.
void fold_system(ordered_json& messages, size_t first_turn, const std::string& text, std::string& pending) {
  if (text.empty()) return;
  if (messages.size() > first_turn) {
    ordered_json& last = messages.back();
    const std::string role = last["role"].get<std::string>();
    if (pending.empty() && (role == "user" || role == "tool")) {
      last["content"] = last["content"].get<std::string>() + "\n\n" + text;
      return;
    }
  }
  pending += (pending.empty() ? "" : "\n\n") + text;
}

void push_turn(ordered_json& messages, ordered_json msg, std::string& pending) {
  const std::string role = msg["role"].get<std::string>();
  if (!pending.empty() && (role == "user" || role == "tool")) {
    if (msg["content"].is_array()) {  // text and images: the pending text goes first, as its own part
      msg["content"].insert(msg["content"].begin(), {{"type", "text"}, {"text", pending + "\n\n"}});
    } else {
      const std::string content = msg["content"].get<std::string>();
      msg["content"] = pending + (content.empty() ? "" : "\n\n" + content);
    }
    pending.clear();
  }
  messages.push_back(std::move(msg));
}

// An Anthropic image block as an OpenAI image_url part: base64 sources as a data: URL, url sources as they
// are.
ordered_json image_part(const ordered_json& b, const std::string& where) {
  if (!b.contains("source") || !b["source"].is_object())
    fail_field(where + ": an image needs a source", "messages");
  const ordered_json& src = b["source"];
  const std::string type = src.value("type", "");
  std::string url;
  if (type == "base64") {
    if (!src.contains("data") || !src["data"].is_string() || !src.contains("media_type") ||
        !src["media_type"].is_string())
      fail_field(where + ".source: a base64 image needs media_type and data", "messages");
    url = "data:" + src["media_type"].get<std::string>() + ";base64," + src["data"].get<std::string>();
  } else if (type == "url") {
    if (!src.contains("url") || !src["url"].is_string())
      fail_field(where + ".source needs a url", "messages");
    url = src["url"].get<std::string>();
  } else {
    fail_field(where + ".source.type must be base64 or url", "messages");
  }
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

// A tool result's content: its text, or, when it holds images (Claude Code's Read of an image file), text and
// image_url parts in order.
ordered_json tool_result_content(const ordered_json& content, const std::string& where) {
  bool images = false;
  if (content.is_array())
    for (const auto& b : content) images = images || (b.is_object() && b.value("type", "") == "image");
  if (!images) return block_text(content, where);
  ordered_json parts = ordered_json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const auto& b = content[k];
    const std::string bw = where + "[" + std::to_string(k) + "]";
    if (b.value("type", "") == "image")
      parts.push_back(image_part(b, bw));
    else
      parts.push_back({{"type", "text"}, {"text", block_text(ordered_json::array({b}), bw)}});
  }
  return parts;
}

void convert_messages(const ordered_json& body, AnthropicChat& c) {
  if (!body.contains("messages") || !body["messages"].is_array())
    fail_field("'messages' is required", "messages");
  if (body["messages"].empty()) fail_field("'messages' must not be empty", "messages");
  const size_t first_turn = c.messages.size();  // after the top-level system prompt
  std::string pending;                          // inline system text waiting for the next user turn
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const auto& m = body["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m.contains("content"))
      fail_field(where + " needs role and content", "messages");
    const std::string role = m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role == "system") {
      fold_system(c.messages, first_turn, system_text(m["content"], where + ".content", "messages"), pending);
      continue;
    }
    if (role != "user" && role != "assistant")
      fail_field(where + ".role must be user, assistant or system", "messages");
    const auto& content = m["content"];
    if (content.is_string()) {
      push_turn(c.messages, {{"role", role}, {"content", content}}, pending);
      continue;
    }
    if (!content.is_array()) fail_field(where + ".content must be a string or a list of blocks", "messages");
    ordered_json msg = {{"role", role}};
    std::string text, thinking;
    ordered_json calls = ordered_json::array();
    ordered_json parts = ordered_json::array();  // text and image parts, once the message has an image
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
        if (!b.contains("name") || !b["name"].is_string())
          fail_field(bw + " tool_use needs a name", "messages");
        calls.push_back(
            {{"id", b.value("id", "")},
             {"type", "function"},
             {"function",
              {{"name", b["name"]}, {"arguments", b.contains("input") ? b["input"].dump() : "{}"}}}});
      } else if (type == "tool_result" && role == "user") {
        push_turn(
            c.messages,
            {{"role", "tool"},
             {"tool_call_id", b.value("tool_use_id", "")},
             {"content", b.contains("content") ? tool_result_content(b["content"], bw + ".content") : ""}},
            pending);
      } else if (type == "image" && role == "user") {
        if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
        text.clear();
        parts.push_back(image_part(b, bw));
      } else if (type == "image" || type == "document") {
        fail_field(bw + ": " + type + " input is not supported here (images go in user messages)",
                   "messages");
      } else {
        fail_field(bw + ": content block type '" + type + "' is not supported in a " + role + " message",
                   "messages");
      }
    }
    if (!parts.empty() && !text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
    if (role == "user" && text.empty() && parts.empty()) continue;  // only tool results
    if (parts.empty())
      msg["content"] = text;
    else
      msg["content"] = std::move(parts);
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    push_turn(c.messages, std::move(msg), pending);
  }
  if (!pending.empty()) c.messages.push_back({{"role", "user"}, {"content", pending}});
}

void convert_tools(const ordered_json& body, AnthropicChat& c) {
  if (body.contains("tools") && !body["tools"].is_null() && !body["tools"].is_array())
    fail_field("'tools' must be a list", "tools");
  const bool has_tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
  if (body.contains("tool_choice") && body["tool_choice"].is_object())
    c.tool_choice = body["tool_choice"].value("type", "auto");
  if (c.tool_choice != "auto" && c.tool_choice != "any" && c.tool_choice != "tool" && c.tool_choice != "none")
    fail_field("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
  if (!has_tools) {
    if (c.tool_choice == "any" || c.tool_choice == "tool")
      fail_field("'tool_choice' is '" + c.tool_choice + "' but no 'tools' were given", "tool_choice");
    return;
  }
  c.tools = ordered_json::array();
  std::set<std::string> names;
  for (const auto& t : body["tools"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      fail_field("every tool needs a name", "tools");
    const std::string n = t["name"].get<std::string>();
    if (n.empty() || n.find_first_of("<>\"' \t\n") != std::string::npos || n.find("]<]") != std::string::npos)
      fail_field("tool name '" + n + "' contains characters that break the tool-call format", "tools");
    if (!names.insert(n).second) fail_field("duplicate tool name '" + n + "'", "tools");
    if (t.contains("input_schema") && !t["input_schema"].is_object())
      fail_field("tool '" + n + "': input_schema must be a JSON schema object", "tools");
    if (t.contains("type") && t["type"].is_string() && t["type"] != "custom" && !t.contains("input_schema"))
      fail_field("server tool '" + t["type"].get<std::string>() + "' is not supported", "tools");
    c.tools.push_back(
        {{"type", "function"},
         {"function",
          {{"name", t["name"]},
           {"description", t.value("description", "")},
           {"parameters", t.contains("input_schema") ? t["input_schema"] : ordered_json::object()}}}});
  }
  if (c.tool_choice == "tool") {
    const std::string want = body["tool_choice"].value("name", "");
    ordered_json only = ordered_json::array();
    for (const auto& t : c.tools)
      if (t["function"]["name"] == want) only.push_back(t);
    if (only.empty())
      fail_field("'tool_choice' names '" + want + "', which is not in 'tools'", "tool_choice");
    c.tools = only;
  }
}

void convert_thinking(const ordered_json& body, AnthropicChat& c) {
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
    c.kwargs = body["chat_template_kwargs"];
  if (!body.contains("thinking") || !body["thinking"].is_object()) return;
  const auto& t = body["thinking"];
  const std::string type = t.value("type", "");
  if (type != "enabled" && type != "disabled" && type != "adaptive")
    fail_field("'thinking.type' must be enabled, disabled or adaptive", "thinking");
  c.kwargs["thinking_mode"] = type;
  if (type == "disabled" || !t.contains("budget_tokens") || t["budget_tokens"].is_null()) return;
  if (!t["budget_tokens"].is_number_integer() || t["budget_tokens"].get<int64_t>() < 0 ||
      t["budget_tokens"].get<int64_t>() > INT32_MAX)
    fail_field("'thinking.budget_tokens' must be a non-negative integer", "thinking.budget_tokens");
  c.thinking_budget = static_cast<int>(t["budget_tokens"].get<int64_t>());
}

// Seconds a cache_control marker asks its prefix to be kept: {type: ephemeral, ttl: 5m (default) | 1h}.
double cache_control_ttl(const ordered_json& cc, const std::string& where) {
  if (!cc.is_object() || cc.value("type", "") != "ephemeral")
    fail_field(where + ".cache_control must be {\"type\": \"ephemeral\"} (with an optional ttl)",
               "cache_control");
  if (!cc.contains("ttl") || cc["ttl"].is_null()) return 300;
  if (cc["ttl"] == "5m") return 300;
  if (cc["ttl"] == "1h") return 3600;
  fail_field(where + ".cache_control.ttl must be 5m or 1h", "cache_control");
}

// The longest retention any cache_control marker of the request asks for (0: none): on the request, its
// system and tool blocks, and the content blocks of its messages (tool results' included).
double retention_seconds(const ordered_json& body) {
  double ttl = 0;
  auto visit = [&](const ordered_json& block, const std::string& where) {
    if (block.is_object() && block.contains("cache_control") && !block["cache_control"].is_null())
      ttl = std::max(ttl, cache_control_ttl(block["cache_control"], where));
  };
  std::function<void(const ordered_json&, const std::string&)> visit_blocks = [&](const ordered_json& blocks,
                                                                                  const std::string& where) {
    if (!blocks.is_array()) return;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string w = where + "[" + std::to_string(i) + "]";
      visit(blocks[i], w);
      if (blocks[i].is_object() && blocks[i].contains("content"))
        visit_blocks(blocks[i]["content"], w + ".content");
    }
  };
  visit(body, "request");
  if (body.contains("system")) visit_blocks(body["system"], "system");
  if (body.contains("tools")) visit_blocks(body["tools"], "tools");
  if (body.contains("messages") && body["messages"].is_array())
    for (size_t i = 0; i < body["messages"].size(); ++i)
      if (body["messages"][i].is_object() && body["messages"][i].contains("content"))
        visit_blocks(body["messages"][i]["content"], "messages[" + std::to_string(i) + "].content");
  return ttl;
}

}  // namespace

AnthropicChat convert_anthropic_request(const ordered_json& body) {
  AnthropicChat c;
  if (body.contains("system") && !body["system"].is_null()) {
    const std::string sys = system_text(body["system"], "'system'", "system");
    if (!sys.empty()) c.messages.push_back({{"role", "system"}, {"content", sys}});
  }
  convert_messages(body, c);
  convert_tools(body, c);
  convert_thinking(body, c);
  c.cache_ttl_seconds = retention_seconds(body);
  return c;
}

}  // namespace m3
