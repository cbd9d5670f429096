// Text-level state machine for <mm:think> / </mm:think> (serving-api.md §3.3). Invariants: a marker switches
// the state and is dropped wherever it appears; the only bytes held across calls are a proper prefix of a
// marker at the very end of the input, and finish() releases them to whichever state is current (the vLLM
// behaviour).
#include "chat/parsers/reasoning_parser.h"

#include <array>

namespace m3 {

ThinkingStart infer_thinking_start(std::string_view prompt) {
  // Markers that end a turn or start one; the last of these in the prompt is the generation prefix (or the
  // lack of one). Plain text after it (a continued assistant message) does not change the answer.
  static constexpr std::array<std::string_view, 10> kSpecials = {
      kThinkOpen,      kThinkClose,   "]~b]",         "[e~[",        "]~!b[",
      "]<]minimax[>[", "<tool_call>", "</tool_call>", "]<]image[>[", "]<]video[>["};
  // The marker occurrence that ends last (the first marker of the list on a tie), found from the end
  // backwards: a rendered prompt ends with its generation prefix, so this stops within a few bytes even on a
  // 4 MB prompt (ten rfind()s over the whole text cost more than tokenizing it).
  std::string_view best;
  for (size_t end = prompt.size(); end > 0 && best.empty(); --end) {
    const char last = prompt[end - 1];
    for (std::string_view m : kSpecials) {
      if (m.back() == last && m.size() <= end && prompt.substr(end - m.size(), m.size()) == m) {
        best = m;
        break;
      }
    }
  }
  if (best == kThinkOpen) return ThinkingStart::kStartsInReasoning;
  if (best == "]~b]") return ThinkingStart::kAdaptive;
  return ThinkingStart::kStartsInContent;
}

ThinkingStart thinking_start_for_mode(std::string_view thinking_mode) {
  if (thinking_mode == "enabled") return ThinkingStart::kStartsInReasoning;
  if (thinking_mode == "disabled") return ThinkingStart::kStartsInContent;
  return ThinkingStart::kAdaptive;  // "adaptive", undefined and unknown values all render no prefix (§2.4)
}

ReasoningParser::ReasoningParser(ThinkingStart start)
    : start_(start), in_reasoning_(start == ThinkingStart::kStartsInReasoning) {}

ReasoningResult ReasoningParser::parse(std::string_view text) const {
  ReasoningParser fresh(start_);
  Delta a = fresh.push(text);
  Delta b = fresh.finish();
  ReasoningResult r;
  a.reasoning += b.reasoning;
  if (!a.reasoning.empty()) r.reasoning = std::move(a.reasoning);
  r.content = std::move(a.content);
  r.content += b.content;
  return r;
}

ReasoningDelta ReasoningParser::push(std::string_view chunk) {
  Delta out;
  if (!finished_) feed(chunk, false, out);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  Delta out;
  if (finished_) return out;
  finished_ = true;
  feed({}, true, out);
  return out;
}

void ReasoningParser::feed(std::string_view chunk, bool eof, Delta& out) {
  held_.append(chunk);
  std::string_view buf(held_);
  size_t emitted = 0;  // buf[0, emitted) has been routed
  auto route = [&](size_t to) {
    (in_reasoning_ ? out.reasoning : out.content).append(buf.substr(emitted, to - emitted));
    emitted = to;
  };
  size_t pos = 0;
  while ((pos = buf.find('<', pos)) != std::string_view::npos) {
    std::string_view rest = buf.substr(pos);
    // In reasoning a repeated opener is dropped (§3.3 rule 3); in content an opener re-enters reasoning (rule
    // 4). A closer in content is the stray one adaptive/disabled replies start with (rule 2): dropped as
    // well.
    bool open = rest.substr(0, kThinkOpen.size()) == kThinkOpen;
    bool close = !open && rest.substr(0, kThinkClose.size()) == kThinkClose;
    if (open || close) {
      route(pos);
      in_reasoning_ = open;
      pos += open ? kThinkOpen.size() : kThinkClose.size();
      emitted = pos;
      continue;
    }
    bool partial = kThinkOpen.substr(0, rest.size()) == rest || kThinkClose.substr(0, rest.size()) == rest;
    if (partial && !eof) {
      route(pos);
      held_.erase(0, pos);
      return;
    }
    ++pos;
  }
  route(buf.size());
  held_.clear();
}

}  // namespace m3
