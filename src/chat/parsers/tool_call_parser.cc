// State machine of the `minimax_m3` tool-call parser over MarkupLexer events. Invariants: every decision
// depends only on events already seen (so streaming and whole-text parsing agree), emitted text is never
// retracted, and a call once announced always gets a well-formed JSON object as arguments, even when the
// output is cut off.
#include "chat/parsers/tool_call_parser.h"

#include "common/json_escape.h"

#include <chrono>
#include <cstdint>
#include <random>
#include <utility>

namespace m3 {
namespace {

using Kind = MarkupEvent::Kind;

// Nesting depth of parameter elements; deeper tags are kept as text, which bounds the converter's recursion.
constexpr size_t kMaxDepth = 64;
constexpr std::string_view kInvoke = "invoke";
constexpr std::string_view kToolCall = "tool_call";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t first_non_space(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!is_space(s[i])) return i;
  }
  return std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The tool name of an invoke tag's attributes: name="f", name='f' or name=f.
std::string_view invoke_name(std::string_view attrs) {
  size_t p = attrs.find("name");
  if (p == std::string_view::npos) return {};
  std::string_view rest = trim(attrs.substr(p + 4));
  if (rest.empty() || rest.front() != '=') return {};
  rest = trim(rest.substr(1));
  if (!rest.empty() && (rest.front() == '"' || rest.front() == '\'')) {
    char quote = rest.front();
    rest.remove_prefix(1);
    return trim(rest.substr(0, rest.find(quote)));
  }
  size_t end = 0;
  while (end < rest.size() && !is_space(rest[end])) ++end;
  return rest.substr(0, end);
}

bool is_invoke_open(const MarkupEvent& e) {
  return e.kind == Kind::kOpen && e.name == kInvoke;
}

// Tags that belong to the block/invoke level. Inside a parameter they end it (the model forgot a close tag)
// instead of becoming part of its value.
bool is_structural(const MarkupEvent& e) {
  if (e.kind != Kind::kOpen && e.kind != Kind::kClose) return false;
  return e.name == kInvoke || e.name == kToolCall;
}

}  // namespace

std::string random_tool_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng = [] {
    uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    try {
      std::random_device device;  // may throw where no entropy source exists; the clock seed then stands
      seed ^= (uint64_t{device()} << 32) | device();
    } catch (...) {
    }
    return std::mt19937_64(seed ^ reinterpret_cast<uintptr_t>(&seed));
  }();
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

ToolCallParser::ToolCallParser(const nlohmann::json& tools, IdGenerator ids) : ids_(std::move(ids)) {
  auto table = std::make_shared<std::vector<Tool>>();
  if (tools.is_array()) {
    for (const auto& t : tools) {
      if (!t.is_object()) continue;
      auto fn_it = t.find("function");
      const nlohmann::json& fn = fn_it != t.end() && fn_it->is_object() ? *fn_it : t;
      auto name_it = fn.find("name");
      if (name_it == fn.end() || !name_it->is_string()) continue;
      const std::string& name = name_it->get_ref<const std::string&>();
      bool seen = false;
      for (const auto& existing : *table) seen = seen || existing.name == name;
      if (seen) continue;  // the first definition of a name wins
      auto params_it = fn.find("parameters");
      table->push_back({name, params_it != fn.end() ? *params_it : nlohmann::json()});
    }
  }
  tools_ = std::move(table);
}

ToolCallParser::ToolCallParser(std::shared_ptr<const std::vector<Tool>> tools, IdGenerator ids)
    : tools_(std::move(tools)), ids_(std::move(ids)) {}

ToolParseResult ToolCallParser::parse(std::string_view text) const {
  ToolCallParser fresh(tools_, ids_);
  ToolDelta parts[2] = {fresh.push(text), fresh.finish()};
  ToolParseResult result;
  for (auto& d : parts) {
    result.content += d.content;
    for (auto& c : d.tool_calls) {
      if (c.index >= result.tool_calls.size()) result.tool_calls.resize(c.index + 1);
      ToolCall& call = result.tool_calls[c.index];
      if (!c.id.empty()) call.id = std::move(c.id);
      if (!c.name.empty()) call.name = std::move(c.name);
      call.arguments_json += c.arguments;
    }
  }
  return result;
}

ToolDelta ToolCallParser::push(std::string_view chunk) {
  out_ = {};
  if (!finished_) feed(chunk, false);
  return std::move(out_);
}

ToolDelta ToolCallParser::finish() {
  out_ = {};
  if (finished_) return {};
  finished_ = true;
  feed({}, true);
  end_of_stream();
  return std::move(out_);
}

void ToolCallParser::feed(std::string_view chunk, bool eof) {
  lexer_.feed(chunk, eof, [this](const MarkupEvent& e) { on_event(e); });
}

void ToolCallParser::on_event(const MarkupEvent& e) {
  switch (mode_) {
    case Mode::kContent:
      on_content(e);
      break;
    case Mode::kBlockOpen:
      on_block_open(e);
      break;
    case Mode::kBetweenInvokes:
      on_between_invokes(e);
      break;
    case Mode::kInvoke:
      on_invoke(e);
      break;
    case Mode::kStringParam:
      on_string_param(e);
      break;
    case Mode::kTreeParam:
      on_tree_param(e);
      break;
  }
}

void ToolCallParser::on_content(const MarkupEvent& e) {
  if (e.kind == Kind::kOpen && e.name == kToolCall) {
    // Not yet a tool call: only an invoke after it (whitespace allowed) confirms the block (§4.2: a lone or
    // partial start marker is text).
    mode_ = Mode::kBlockOpen;
    held_.assign(e.raw);
    return;
  }
  if (is_invoke_open(e) && !invoke_name(e.attrs).empty()) {
    // An invoke with its namespace marker but without the <tool_call> wrapper is still unambiguous.
    after_block_ = false;
    held_space_.clear();
    mode_ = Mode::kBetweenInvokes;
    on_event(e);
    return;
  }
  emit_content(e.raw);
}

void ToolCallParser::on_block_open(const MarkupEvent& e) {
  if (e.kind == Kind::kText && first_non_space(e.raw) == std::string_view::npos) {
    held_ += e.raw;
    return;
  }
  if (is_invoke_open(e) && !invoke_name(e.attrs).empty()) {
    held_.clear();
    after_block_ = false;
    held_space_.clear();
    mode_ = Mode::kBetweenInvokes;
    on_event(e);
    return;
  }
  mode_ = Mode::kContent;
  std::string held = std::move(held_);
  held_.clear();
  emit_content(held);
  on_event(e);
}

void ToolCallParser::on_between_invokes(const MarkupEvent& e) {
  if (e.kind == Kind::kText) {
    size_t start = first_non_space(e.raw);
    if (start == std::string_view::npos) return;
    // Prose inside a block means the model left it without a close tag: the block is over.
    mode_ = Mode::kContent;
    emit_content(e.raw.substr(start));
    return;
  }
  if (is_invoke_open(e)) {
    if (start_call(e)) mode_ = Mode::kInvoke;
    return;
  }
  if (e.kind == Kind::kClose && e.name == kToolCall) {
    mode_ = Mode::kContent;
    after_block_ = true;
  }
  // Any other tag here is a stray, and a tag cut off by the end of output is unfinished structure: dropped.
}

void ToolCallParser::on_invoke(const MarkupEvent& e) {
  if (e.kind == Kind::kText) return;  // whitespace or junk between parameters
  if (is_invoke_open(e)) {
    end_call();
    on_event(e);
    return;
  }
  if (e.kind == Kind::kClose && e.name == kInvoke) {
    end_call();
    return;
  }
  if (e.kind == Kind::kClose && e.name == kToolCall) {
    end_call();
    mode_ = Mode::kContent;
    after_block_ = true;
    return;
  }
  if (e.kind == Kind::kOpen && e.name != kToolCall) begin_param(e.name);
}

void ToolCallParser::on_string_param(const MarkupEvent& e) {
  if (e.kind == Kind::kCutTag) return;  // a tag cut off by the end of output is structure, not value text
  if (e.kind == Kind::kText) {
    if (discard_param_) return;
    std::string escaped;
    append_json_escaped(escaped, e.raw);
    emit_args(escaped);
    return;
  }
  if (e.kind == Kind::kClose && !is_structural(e) && e.name != param_) return;  // stray close: dropped
  // Its own close tag ends the string; so does any opening or structural tag, which means the model forgot
  // the close (the namespace marker is a special token, so it is never part of a value).
  if (!discard_param_) emit_args("\"");
  mode_ = Mode::kInvoke;
  if (e.kind == Kind::kOpen || is_structural(e)) on_event(e);
}

void ToolCallParser::on_tree_param(const MarkupEvent& e) {
  if (e.kind == Kind::kCutTag) return;
  if (is_structural(e)) {
    finish_tree_param();
    mode_ = Mode::kInvoke;
    on_event(e);
    return;
  }
  if (e.kind == Kind::kText) {
    stack_.back().node.text += e.raw;
    return;
  }
  if (e.kind == Kind::kOpen) {
    // A scalar element cannot have children: the tag is its sibling and its own close tag is missing.
    if (stack_.back().leaf_only) pop_frame();
    if (stack_.empty()) {
      mode_ = Mode::kInvoke;
      on_event(e);
      return;
    }
    if (stack_.size() >= kMaxDepth) {
      stack_.back().node.text += e.raw;
      return;
    }
    Frame child;
    child.node.name.assign(e.name);
    child.schema = tool_schema::child_schema(stack_.back().schema, e.name);
    child.leaf_only = !tool_schema::accepts_children(child.schema);
    stack_.push_back(std::move(child));
    return;
  }
  // A close tag closes its element and any still open inside it; one matching nothing is dropped.
  size_t match = stack_.size();
  while (match > 0 && stack_[match - 1].node.name != e.name) --match;
  if (match == 0) return;
  while (stack_.size() >= match) pop_frame();
  if (stack_.empty()) mode_ = Mode::kInvoke;
}

void ToolCallParser::end_of_stream() {
  switch (mode_) {
    case Mode::kContent:
      break;
    case Mode::kBlockOpen: {
      // The stream ended before any invoke: the opener was text after all.
      mode_ = Mode::kContent;
      std::string held = std::move(held_);
      held_.clear();
      emit_content(held);
      break;
    }
    case Mode::kBetweenInvokes:
      break;
    case Mode::kInvoke:
      end_call();
      break;
    case Mode::kStringParam:
      // The string's prefix was already streamed; closing it keeps the arguments valid JSON.
      if (!discard_param_) emit_args("\"");
      end_call();
      break;
    case Mode::kTreeParam:
      // A cut-off number, boolean or structure is not trustworthy: the parameter is dropped.
      stack_.clear();
      end_call();
      break;
  }
  mode_ = Mode::kContent;
  held_space_.clear();  // whitespace after the last block is not content
}

bool ToolCallParser::start_call(const MarkupEvent& invoke_tag) {
  std::string_view name = invoke_name(invoke_tag.attrs);
  if (name.empty()) return false;
  tool_ = nullptr;
  for (const auto& t : *tools_) {
    if (t.name == name) {
      tool_ = &t;
      break;
    }
  }
  ToolCallDelta d;
  d.index = next_index_++;
  d.id = ids_ ? ids_() : random_tool_call_id();
  d.name.assign(name);
  d.arguments = "{";
  out_.tool_calls.push_back(std::move(d));
  has_params_ = false;
  keys_.clear();
  return true;
}

void ToolCallParser::end_call() {
  emit_args("}");
  tool_ = nullptr;
  keys_.clear();
  mode_ = Mode::kBetweenInvokes;
}

void ToolCallParser::begin_param(std::string_view name) {
  param_.assign(name);
  // A repeated top-level parameter cannot be merged into what was already streamed: the first one wins.
  discard_param_ = !keys_.insert(param_).second;
  tool_schema::Schema params;
  if (tool_ != nullptr) params = {&tool_->parameters, &tool_->parameters};
  tool_schema::Schema schema = tool_schema::child_schema(params, name);
  if (tool_schema::is_verbatim_string(schema)) {
    mode_ = Mode::kStringParam;
    if (!discard_param_) {
      emit_key(param_);
      emit_args("\"");
    }
    return;
  }
  mode_ = Mode::kTreeParam;
  stack_.clear();
  Frame root;
  root.node.name = param_;
  root.schema = schema;
  root.leaf_only = !tool_schema::accepts_children(schema);
  stack_.push_back(std::move(root));
}

void ToolCallParser::finish_tree_param() {
  while (!stack_.empty()) pop_frame();
}

void ToolCallParser::pop_frame() {
  Frame f = std::move(stack_.back());
  stack_.pop_back();
  if (!stack_.empty()) {
    stack_.back().node.children.push_back(std::move(f.node));
    return;
  }
  if (discard_param_) return;
  std::string value;
  tool_schema::append_converted(value, f.node, f.schema);
  emit_key(param_);
  emit_args(value);
}

void ToolCallParser::emit_content(std::string_view text) {
  if (text.empty()) return;
  if (after_block_) {
    if (first_non_space(text) == std::string_view::npos) {
      held_space_ += text;
      return;
    }
    after_block_ = false;
    out_.content += held_space_;
    held_space_.clear();
  }
  out_.content += text;
}

void ToolCallParser::emit_args(std::string_view fragment) {
  size_t index = next_index_ - 1;
  if (!out_.tool_calls.empty() && out_.tool_calls.back().index == index) {
    out_.tool_calls.back().arguments += fragment;
    return;
  }
  ToolCallDelta d;
  d.index = index;
  d.arguments.assign(fragment);
  out_.tool_calls.push_back(std::move(d));
}

void ToolCallParser::emit_key(std::string_view key) {
  std::string s = has_params_ ? ", " : "";
  has_params_ = true;
  tool_schema::append_json_string(s, key);
  s += ": ";
  emit_args(s);
}

}  // namespace m3
