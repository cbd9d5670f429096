// `minimax_m3` tool-call parser: turns the content stream (after the reasoning parser) into OpenAI content
// and tool_calls (serving-api.md §4). Invariants: never throws on model text; the concatenated streaming
// deltas equal the non-streaming result for every way of splitting the text; work per push is linear in the
// chunk.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/parsers/markup_lexer.h"
#include "chat/parsers/tool_schema.h"

namespace m3 {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments_json;  // a JSON object as text, json.dumps style: {"city": "Paris", "days": 3}
};

struct ToolParseResult {
  std::string content;  // text outside tool-call blocks; empty when there was none
  std::vector<ToolCall> tool_calls;
};

// One OpenAI `delta.tool_calls[]` entry. The first entry of a call carries its id and name (and "{"); later
// ones carry only argument fragments. Concatenating `arguments` per index gives the call's arguments_json.
struct ToolCallDelta {
  size_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ToolDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

// Returns a fresh OpenAI tool-call id: "call_" + 24 random alphanumerics.
std::string random_tool_call_id();

// Behaviour where peers differ (serving-api.md §4.2-4.3), chosen so that nothing streamed is ever retracted:
// - A call is announced (index, id, name, "{") as soon as its `<invoke name="…">` tag is complete; parameters
//   whose schema makes them always strings stream as they arrive, other values when their element closes,
//   and "}" when the invoke closes. vLLM sends each call whole; SGLang streams like this.
// - `]<]minimax[>[<tool_call>` only becomes a block once an invoke follows; otherwise it is content (vLLM).
// - Content is all text outside blocks, including text between or after blocks (vLLM drops text after the
//   block); whitespace after the last block is dropped.
// - Malformed output is best effort: a tag that cannot be inside a value (`invoke`, `tool_call`, any tag
//   in a scalar) closes what is open; junk and stray tags between parameters are dropped; prose where an
//   invoke should start ends the block. A cut-off string value is kept (closed), a cut-off value of another
//   type is dropped. vLLM instead returns the whole output as content on a parse error (not streamable).
// - Unknown tool names still parse, with every value a string; so do parameters missing from the schema.
// - A repeated top-level parameter keeps its first value (vLLM makes a list); nested repeats make a list.
// - Values are raw text: no XML entity decoding, since the template writes values unescaped.
class ToolCallParser {
 public:
  using IdGenerator = std::function<std::string()>;

  // `tools`: the request's OpenAI tool list ({"type":"function","function":{name, parameters}} or flat
  // {name, parameters}); anything else in it is ignored. Names not in the list still parse, untyped.
  explicit ToolCallParser(const nlohmann::json& tools, IdGenerator ids = random_tool_call_id);

  // Whole-output parse. Independent of the streaming state; draws ids from a copy of the generator.
  ToolParseResult parse(std::string_view text) const;

  // Streaming: feed detokenized text in order, then call finish() once.
  ToolDelta push(std::string_view chunk);
  ToolDelta finish();

  // Tool calls started so far (for finish_reason "tool_calls").
  size_t tool_call_count() const { return next_index_; }

 private:
  struct Tool {
    std::string name;
    nlohmann::json parameters;
  };
  enum class Mode { kContent, kBlockOpen, kBetweenInvokes, kInvoke, kStringParam, kTreeParam };
  struct Frame {
    tool_schema::Schema schema;
    bool leaf_only = false;     // its schema allows no children: a child tag implicitly closes it
    tool_schema::XmlNode node;  // node.name is the element's tag name
  };

  ToolCallParser(std::shared_ptr<const std::vector<Tool>> tools, IdGenerator ids);

  void feed(std::string_view chunk, bool eof);
  void on_event(const MarkupEvent& e);
  void on_content(const MarkupEvent& e);
  void on_block_open(const MarkupEvent& e);
  void on_between_invokes(const MarkupEvent& e);
  void on_invoke(const MarkupEvent& e);
  void on_string_param(const MarkupEvent& e);
  void on_tree_param(const MarkupEvent& e);
  void end_of_stream();

  bool start_call(const MarkupEvent& invoke_tag);
  void end_call();
  void begin_param(std::string_view name);
  void finish_tree_param();
  void pop_frame();
  void emit_content(std::string_view text);
  void emit_args(std::string_view fragment);
  void emit_key(std::string_view key);

  std::shared_ptr<const std::vector<Tool>> tools_;
  IdGenerator ids_;
  MarkupLexer lexer_;
  ToolDelta out_;  // what the current push/finish produces
  Mode mode_ = Mode::kContent;
  bool finished_ = false;

  std::string held_;          // kBlockOpen: the block opener (and whitespace) until an invoke confirms it
  bool after_block_ = false;  // whitespace right after a closed block is held and dropped at the end
  std::string held_space_;
  size_t next_index_ = 0;                 // index of the next tool call; the open one is next_index_ - 1
  const Tool* tool_ = nullptr;            // schema of the open call (nullptr: unknown name)
  bool has_params_ = false;               // a parameter of the open call was already written
  std::unordered_set<std::string> keys_;  // parameters seen in the open call (duplicates are dropped)
  std::string param_;                     // the open top-level parameter
  bool discard_param_ = false;            // the open parameter is a duplicate
  std::vector<Frame> stack_;              // kTreeParam: the open elements, outermost first
};

}  // namespace m3
