// Fuzz target for ToolCallParser, alone or behind ReasoningParser. Input: byte 0 picks the tool list and
// whether the reasoning parser runs first, bytes 1-2 seed the chunk split, the rest is model output. Traps
// unless streaming at the fuzz-chosen splits (and byte by byte) equals the whole-text result, the deltas have
// the OpenAI shape (id and name first, indexes in order), and, for UTF-8 input, every call's arguments are a
// JSON object.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "chat/parsers/tool_call_parser.h"

namespace {

const nlohmann::json& tool_list(int which) {
  static const nlohmann::json kLists[] = {
      nlohmann::json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
          "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
          "query": {"type": "string"}, "top_k": {"type": "integer"},
          "filters": {"type": "object", "properties": {"site": {"type": "string"}, "recent": {"type": "boolean"},
                                                        "min_score": {"type": "number"}}},
          "tags": {"type": "array", "items": {"type": "string"}}}}}},
        {"type": "function", "function": {"name": "set_config", "parameters": {"type": "object", "properties": {
          "mode": {"type": ["integer", "string"]}, "note": {"type": ["null", "string"]},
          "values": {"type": "array", "items": {"type": "integer"}}, "any": {"anyOf": [{"type": "number"},
          {"type": "array", "items": {"type": "array"}}, {"type": "null"}]}, "raw": {}}}}},
        {"type": "function", "function": {"name": "tree", "parameters": {"$defs": {"N": {"type": "object",
          "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}},
          "type": "object", "properties": {"root": {"$ref": "#/$defs/N"}, "loop": {"$ref": "#/properties/loop"}}}}}
      ])"),
      nlohmann::json::array(),
      nlohmann::json::parse(
          R"([{"name": "get_weather", "parameters": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}},
        {"name": "search", "parameters": [1]}, {"name": "x"}, 5])")};
  return kLists[which % 3];
}

struct Result {
  std::string content;
  std::vector<m3::ToolCall> calls;
};

void add(Result& r, const m3::ToolDelta& d) {
  r.content += d.content;
  for (const auto& c : d.tool_calls) {
    if (c.index == r.calls.size()) {
      if (c.id.empty() || c.name.empty()) __builtin_trap();
      r.calls.push_back({c.id, c.name, ""});
    } else if (c.index + 1 != r.calls.size() || !c.id.empty() || !c.name.empty()) {
      __builtin_trap();
    }
    r.calls[c.index].arguments_json += c.arguments;
  }
}

m3::ToolCallParser::IdGenerator ids() {
  return [n = 0]() mutable { return "call_" + std::to_string(n++); };
}

Result stream(const nlohmann::json& tools, bool chain, std::string_view text,
              const std::vector<size_t>& cuts) {
  m3::ReasoningParser rp(m3::ThinkingStart::kAdaptive);
  m3::ToolCallParser tp(tools, ids());
  Result r;
  size_t prev = 0;
  auto push = [&](std::string_view chunk) {
    add(r, tp.push(chain ? std::string_view(rp.push(chunk).content) : chunk));
  };
  for (size_t c : cuts) {
    push(text.substr(prev, c - prev));
    prev = c;
  }
  push(text.substr(prev));
  if (chain) add(r, tp.push(rp.finish().content));
  add(r, tp.finish());
  return r;
}

bool same(const Result& a, const Result& b) {
  if (a.content != b.content || a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    if (a.calls[i].id != b.calls[i].id || a.calls[i].name != b.calls[i].name ||
        a.calls[i].arguments_json != b.calls[i].arguments_json) {
      return false;
    }
  }
  return true;
}

bool valid_utf8(std::string_view s) {
  // Strict (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF, as nlohmann's parser
  // demands.
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    unsigned char c1 = n > 1 ? static_cast<unsigned char>(s[i + 1]) : 0;
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
        (c == 0xf4 && c1 >= 0x90)) {
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const nlohmann::json& tools = tool_list(data[0] & 3);
  bool chain = (data[0] & 4) != 0;
  uint32_t seed = (uint32_t{data[1]} << 8 | data[2]) * 2654435761u + 1;
  std::string_view text(reinterpret_cast<const char*>(data + 3), size - 3);

  Result whole;
  {
    std::string content(text);
    if (chain) content = m3::ReasoningParser(m3::ThinkingStart::kAdaptive).parse(text).content;
    m3::ToolParseResult r = m3::ToolCallParser(tools, ids()).parse(content);
    whole.content = r.content;
    whole.calls = r.tool_calls;
  }
  if (valid_utf8(text)) {
    for (const auto& c : whole.calls) {
      if (!nlohmann::json::parse(c.arguments_json, nullptr, false).is_object()) __builtin_trap();
    }
  }

  std::vector<size_t> cuts;
  size_t n = seed % 9;
  size_t at = 0;
  for (size_t i = 0; i < n && !text.empty(); ++i) {
    seed = seed * 1103515245u + 12345u;
    at = std::min(text.size(), at + (seed >> 8) % (text.size() / (n ? n : 1) + 2));
    cuts.push_back(at);
  }
  if (!same(stream(tools, chain, text, cuts), whole)) __builtin_trap();

  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  if (!same(stream(tools, chain, text, every), whole)) __builtin_trap();
  return 0;
}
