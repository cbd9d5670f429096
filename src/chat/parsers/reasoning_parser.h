// `minimax_m3` reasoning parser: splits generated text into reasoning (inside <mm:think>…</mm:think>) and
// content (serving-api.md §3). Invariants: the think markers never reach either output; the concatenated
// streaming deltas equal the non-streaming result for every way of splitting the text; at most one partial
// marker is held back.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace m3 {

inline constexpr std::string_view kThinkOpen = "<mm:think>";
inline constexpr std::string_view kThinkClose = "</mm:think>";

// Where generation starts, decided by the end of the rendered prompt (§2.4, §3.3 rule 1).
enum class ThinkingStart {
  kStartsInReasoning,  // prompt ends with <mm:think> (thinking_mode "enabled")
  kStartsInContent,    // prompt ends with </mm:think> ("disabled"), or no chat turn at all (raw completions)
  kAdaptive,           // prompt ends with a bare assistant header (adaptive / undefined): the model decides
};

// The equivalent of vLLM's backward scan over prompt token ids, on text: the last special marker in the
// prompt decides. Marker text inside the system prompt's instructions is followed by later markers, so it
// never does.
ThinkingStart infer_thinking_start(std::string_view rendered_prompt);

// The start implied by a `thinking_mode` template variable ("" = undefined), for callers that have no prompt
// text.
ThinkingStart thinking_start_for_mode(std::string_view thinking_mode);

struct ReasoningResult {
  std::optional<std::string> reasoning;  // absent when there was no reasoning text
  std::string content;
};

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// §3.3 consensus, on text: <mm:think> enters reasoning (a redundant one is dropped, re-entry from content is
// allowed); </mm:think> leaves it, and in content, where adaptive/disabled replies may start with one, it is
// dropped wherever it appears. kAdaptive and kStartsInContent therefore parse identically. Text is not
// trimmed. Output cut off inside reasoning stays reasoning (vLLM/SGLang; TRT-LLM would make it content); a
// marker cut off at the very end ("</mm:th") is flushed as text of the current state (vLLM). Reasoning that
// comes out empty is reported as absent.
class ReasoningParser {
 public:
  using Delta = ReasoningDelta;

  explicit ReasoningParser(ThinkingStart start);

  // Whole-output parse; independent of the streaming state.
  ReasoningResult parse(std::string_view text) const;

  // Streaming: feed detokenized text in order, then call finish() once. A chunk ending in a possible partial
  // marker ("</mm:th") has that tail held back until the next chunk (or finish) settles it.
  Delta push(std::string_view chunk);
  Delta finish();

  // True while generated text goes to reasoning (for counting reasoning tokens).
  bool in_reasoning() const { return in_reasoning_; }

 private:
  void feed(std::string_view chunk, bool eof, Delta& out);

  ThinkingStart start_;
  bool in_reasoning_;
  bool finished_ = false;
  std::string held_;
};

}  // namespace m3
