// Fuzz target for ReasoningParser (and infer_thinking_start). Input: byte 0 picks the thinking start, bytes
// 1-2 seed the chunk split, the rest is model output. Traps unless streaming at the fuzz-chosen splits (and
// byte by byte) gives exactly the whole-text result, and unless no think marker survives into either output.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/parsers/reasoning_parser.h"

namespace {

struct Out {
  std::string reasoning, content;
};

Out stream(m3::ThinkingStart start, std::string_view text, const std::vector<size_t>& cuts) {
  m3::ReasoningParser p(start);
  Out o;
  size_t prev = 0;
  auto add = [&](const m3::ReasoningDelta& d) {
    o.reasoning += d.reasoning;
    o.content += d.content;
  };
  for (size_t c : cuts) {
    add(p.push(text.substr(prev, c - prev)));
    prev = c;
  }
  add(p.push(text.substr(prev)));
  add(p.finish());
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static const m3::ThinkingStart kStarts[] = {m3::ThinkingStart::kStartsInReasoning,
                                              m3::ThinkingStart::kStartsInContent,
                                              m3::ThinkingStart::kAdaptive};
  m3::ThinkingStart start = kStarts[data[0] % 3];
  uint32_t seed = (uint32_t{data[1]} << 8 | data[2]) * 2654435761u + 1;
  std::string_view text(reinterpret_cast<const char*>(data + 3), size - 3);

  (void)m3::infer_thinking_start(text);
  m3::ReasoningResult whole = m3::ReasoningParser(start).parse(text);
  std::string reasoning = whole.reasoning.value_or("");
  if (whole.reasoning && whole.reasoning->empty()) __builtin_trap();

  std::vector<size_t> cuts;
  size_t n = seed % 9;
  size_t at = 0;
  for (size_t i = 0; i < n && !text.empty(); ++i) {
    seed = seed * 1103515245u + 12345u;
    at = std::min(text.size(), at + (seed >> 8) % (text.size() / (n ? n : 1) + 2));
    cuts.push_back(at);
  }
  Out s = stream(start, text, cuts);
  if (s.reasoning != reasoning || s.content != whole.content) __builtin_trap();

  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  Out b = stream(start, text, every);
  if (b.reasoning != reasoning || b.content != whole.content) __builtin_trap();
  return 0;
}
