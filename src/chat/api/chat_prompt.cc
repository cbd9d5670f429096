// Validation of message roles happens here, before the template sees them, so errors name the message index.
// Special-token text in client-written strings (user / system / tool content, tool-call arguments, tool
// definitions) is tokenized as plain text, never as the special token (landscape.md §4.9 row 40): it is
// swapped for private-use placeholders before rendering and encoded without special-token matching after.
#include "chat/api/chat_prompt.h"

#include <set>

#include "chat/template/value.h"
#include "common/error.h"
#include "common/log.h"

namespace m3 {
namespace {

constexpr std::string_view kOpen = "\uE000", kClose = "\uE001";  // placeholder: OPEN <index digits> CLOSE

// The strings a client could use to smuggle special tokens into the prompt (plus the placeholder mark).
std::vector<std::string> protected_strings(const Tokenizer& tok) {
  std::vector<std::string> out = {std::string(kOpen)};
  for (int32_t id : tok.added_token_ids())
    if (tok.is_special(id) && !tok.id_to_token(id).empty()) out.push_back(tok.id_to_token(id));
  return out;
}

std::string placeholder(size_t i) {
  return std::string(kOpen) + std::to_string(i) + std::string(kClose);
}

void protect_string(std::string& s, const std::vector<std::string>& specials) {
  bool any = false;
  for (const std::string& sp : specials) any = any || s.find(sp) != std::string::npos;
  if (!any) return;
  std::string out;
  for (size_t at = 0; at < s.size();) {
    size_t which = specials.size();
    for (size_t i = 0; i < specials.size(); ++i)
      if (s.compare(at, specials[i].size(), specials[i]) == 0) {
        which = i;
        break;
      }
    if (which == specials.size()) {
      out += s[at++];
    } else {
      out += placeholder(which);
      at += specials[which].size();
    }
  }
  s = std::move(out);
}

// Every string (and object key) under `j`.
void protect(nlohmann::ordered_json& j, const std::vector<std::string>& specials) {
  if (j.is_string()) {
    protect_string(j.get_ref<std::string&>(), specials);
  } else if (j.is_array()) {
    for (auto& v : j) protect(v, specials);
  } else if (j.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string key = it.key();
      protect_string(key, specials);
      out[key] = it.value();
      protect(out[key], specials);
    }
    j = std::move(out);
  }
}

// Rendered text with placeholders -> (ids, text with the original strings back).
std::pair<std::vector<int32_t>, std::string> encode_protected(const Tokenizer& tok, const std::string& text,
                                                              const std::vector<std::string>& specials) {
  std::vector<int32_t> ids;
  std::string restored;
  size_t at = 0;
  auto plain = [&](size_t end) {
    const std::string_view seg(text.data() + at, end - at);
    const auto part = tok.encode(seg, /*parse_special=*/true);
    ids.insert(ids.end(), part.begin(), part.end());
    restored += seg;
  };
  for (size_t open; (open = text.find(kOpen, at)) != std::string::npos;) {
    const size_t close = text.find(kClose, open);
    size_t index = specials.size();
    if (close != std::string::npos) {
      try {
        index = std::stoul(text.substr(open + kOpen.size(), close - open - kOpen.size()));
      } catch (...) {
      }
    }
    M3_CHECK(index < specials.size(), "chat prompt placeholder without its string");
    plain(open);
    const auto part = tok.encode(specials[index], /*parse_special=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
    restored += specials[index];
    at = close + kClose.size();
  }
  plain(text.size());
  return {std::move(ids), std::move(restored)};
}

// The template refused the conversation. Its author's raise_exception text is meant for users and is kept;
// anything else is an interpreter detail, logged here and replaced by a message naming the first message the
// template cannot render: the shortest failing prefix, found by bisection (a template reads messages in
// order), so a long conversation costs O(n log n) renders on this error path, not O(n^2).
[[noreturn]] void template_refused(const chat::ChatTemplate& tmpl, const chat::ChatRenderInput& in,
                                   const jinja::TemplateError& e) {
  chat::ChatRenderInput prefix = in;
  prefix.add_generation_prompt = false;
  auto fails = [&](size_t n) {
    prefix.messages = nlohmann::ordered_json::array();
    for (size_t i = 0; i < n; ++i) prefix.messages.push_back(in.messages[i]);
    try {
      tmpl.render(prefix);
      return false;
    } catch (const Error&) {
      return true;
    }
  };
  std::string culprit;
  if (fails(in.messages.size())) {           // else only the generation prompt fails: no message to name
    size_t lo = 1, hi = in.messages.size();  // the shortest failing prefix is in [lo, hi]
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (fails(mid))
        hi = mid;
      else
        lo = mid + 1;
    }
    culprit = "messages[" + std::to_string(lo - 1) + "]";
  }
  if (e.user_raised()) fail_field((culprit.empty() ? "" : culprit + ": ") + e.bare_message(), "messages");
  log_warn("chat template error: ", e.what());
  fail_field((culprit.empty() ? std::string("the conversation") : culprit) +
                 " cannot be rendered by the model's chat template (check its role, content and tool "
                 "calls)",
             "messages");
}

}  // namespace

ChatPrompt render_chat_prompt(const PromptModel& ctx, const nlohmann::ordered_json& messages,
                              const nlohmann::ordered_json& tools, bool add_generation_prompt,
                              const nlohmann::ordered_json& kwargs, bool allow_media) {
  if (!messages.is_array()) fail_field("'messages' must be a list", "messages");
  if (messages.empty()) fail_field("'messages' must not be empty", "messages");
  static const std::set<std::string> roles = {"root", "system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail_field(where + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) fail_field(where + ".role is missing", "messages");
    if (!roles.count(m["role"].get<std::string>()))
      fail_field(where + ".role '" + m["role"].get<std::string>() +
                     "' is not one of root, system, developer, user, assistant, tool",
                 "messages");
    if (!allow_media && m.contains("content") && m["content"].is_array())
      for (const auto& part : m["content"]) {
        const std::string type = part.is_object() ? part.value("type", "") : "";
        if (type.find("image") != std::string::npos || type.find("video") != std::string::npos ||
            type.find("audio") != std::string::npos)
          fail_field(where + ": " + type + " input is not supported by this server (text only)", "messages");
      }
  }
  if (!kwargs.is_null() && !kwargs.is_object())
    fail_field("'chat_template_kwargs' must be an object", "chat_template_kwargs");

  ChatPrompt p;
  chat::ChatRenderInput in;
  const std::vector<std::string> specials = protected_strings(ctx.tokenizer);
  try {
    in.messages = chat::normalize_messages(messages, ctx.chat_template.content_format());
  } catch (const Error& e) {
    if (!e.param().empty()) throw;
    throw Error(e.kind(), e.what(), "messages");
  }
  for (auto& m : in.messages) {
    if (m.value("role", "") != "assistant" && m.contains("content")) protect(m["content"], specials);
    if (m.contains("tool_calls")) protect(m["tool_calls"], specials);
  }
  if (!tools.is_null()) {
    if (!tools.is_array()) fail_field("'tools' must be a list", "tools");
    p.tools = chat::normalize_tools(tools);
    in.tools = p.tools;
    protect(in.tools, specials);
  }
  in.add_generation_prompt = add_generation_prompt;
  in.kwargs = kwargs;
  in.bos_token = ctx.bos_token;
  in.eos_token = ctx.eos_token;
  try {
    p.text = ctx.chat_template.render(in);
  } catch (const jinja::TemplateError& e) {
    template_refused(ctx.chat_template, in, e);
  }
  p.thinking = infer_thinking_start(p.text);  // placeholders still in: client text cannot decide it
  std::tie(p.ids, p.text) = encode_protected(ctx.tokenizer, p.text, specials);
  return p;
}

}  // namespace m3
