// Per-request text pipeline shared by every endpoint: engine token events -> incremental detokenizer -> stop
// strings (text that could still become a stop string is held back) -> reasoning parser -> tool-call parser
// -> deltas. Streaming responses send each delta; non-streaming ones concatenate them, so the two always
// agree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "chat/parsers/tool_call_parser.h"
#include "engine/engine.h"
#include "tokenizer/incremental_detokenizer.h"

namespace m3 {

struct TextOptions {
  bool skip_special_tokens = true;
  std::vector<std::string> stop;  // stop strings, matched on the generated text
  bool include_stop_str_in_output = false;
  std::optional<ThinkingStart> reasoning;  // set: split <mm:think> reasoning from content
  std::optional<nlohmann::json> tools;     // set: parse tool calls out of the content
};

struct OutputDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<int32_t> token_ids;       // tokens this delta covers
  std::vector<TokenLogprobs> logprobs;  // one per token, when requested
  bool finished = false;
  std::string finish_reason;   // "stop" | "length" | "tool_calls" | "abort"
  nlohmann::json stop_reason;  // null (EOS), the stop token id, or the stop string
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class OutputProcessor {
 public:
  OutputProcessor(const Tokenizer& tokenizer, TextOptions options);

  // Feeds one engine event. When it completes a stop string the delta is final: the caller must abort the
  // engine request (stop_string_hit() tells) and ignore later events.
  OutputDelta on_event(const TokenEvent& event);
  bool stop_string_hit() const { return stop_hit_; }
  bool finished() const { return finished_; }

  int num_tokens() const { return num_tokens_; }
  int reasoning_tokens() const { return reasoning_tokens_; }
  size_t tool_call_count() const { return tools_ ? tools_->tool_call_count() : 0; }

 private:
  // `truncated`: generation was cut (length / abort), so a tool call still open at the end is left open
  // rather than closed into a complete-looking call (landscape.md §4.9 row 48).
  void route(const std::string& text, bool eof, bool truncated, OutputDelta& out);

  IncrementalDetokenizer detok_;  // keeps special tokens when a parser runs; on_event filters them
  TextOptions opt_;
  Tokenizer tok_;
  std::vector<int32_t> markers_;  // special ids an active parser must see (think / tool-call markers)
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
  std::string held_;  // generated text not yet released (a stop string might start in it)
  size_t max_stop_ = 0;
  bool stop_hit_ = false, finished_ = false;
  int num_tokens_ = 0, reasoning_tokens_ = 0;
};

}  // namespace m3
