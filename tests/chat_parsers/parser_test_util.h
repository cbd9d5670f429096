// Helpers shared by the chat-parser tests: fixture loading, the reasoning -> tool-call chain run whole or
// streamed over given chunks, and a checker for the shape of streamed tool-call deltas.
#pragma once

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "chat/parsers/tool_call_parser.h"

namespace m3::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

inline constexpr const char* kFixtureDir = "tests/fixtures/chat_parsers/";

// Deterministic ids: call_0, call_1, ... for each parser constructed with it.
inline ToolCallParser::IdGenerator counter_ids() {
  return [n = 0]() mutable { return "call_" + std::to_string(n++); };
}

struct ChainResult {
  std::optional<std::string> reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ChainResult& o) const {
    if (reasoning != o.reasoning || content != o.content || tool_calls.size() != o.tool_calls.size())
      return false;
    for (size_t i = 0; i < tool_calls.size(); ++i) {
      const auto &a = tool_calls[i], &b = o.tool_calls[i];
      if (a.id != b.id || a.name != b.name || a.arguments_json != b.arguments_json) return false;
    }
    return true;
  }
};

inline std::ostream& operator<<(std::ostream& os, const ChainResult& r) {
  nlohmann::json j;
  j["reasoning"] = r.reasoning ? nlohmann::json(*r.reasoning) : nlohmann::json();
  j["content"] = r.content;
  j["tool_calls"] = nlohmann::json::array();
  for (const auto& c : r.tool_calls)
    j["tool_calls"].push_back({{"id", c.id}, {"name", c.name}, {"args", c.arguments_json}});
  return os << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Folds streamed tool-call deltas into calls, checking the OpenAI delta shape on the way: a call's first
// delta has its id and name, later ones have neither, and indexes only grow.
class DeltaCollector {
 public:
  void add(const ToolDelta& d, std::string& content) {
    content += d.content;
    for (const auto& c : d.tool_calls) {
      if (c.index == calls.size()) {
        EXPECT_FALSE(c.id.empty()) << "first delta of call " << c.index << " has no id";
        EXPECT_FALSE(c.name.empty()) << "first delta of call " << c.index << " has no name";
        calls.push_back({c.id, c.name, ""});
      } else {
        EXPECT_EQ(c.index + 1, calls.size()) << "delta for a call that is not the latest";
        EXPECT_TRUE(c.id.empty() && c.name.empty()) << "id/name repeated in a later delta";
        if (c.index >= calls.size()) continue;
      }
      calls[c.index].arguments_json += c.arguments;
    }
  }
  std::vector<ToolCall> calls;
};

inline ChainResult run_whole(std::string_view text, ThinkingStart start, const nlohmann::json& tools) {
  ReasoningResult r = ReasoningParser(start).parse(text);
  ToolParseResult t = ToolCallParser(tools, counter_ids()).parse(r.content);
  return {r.reasoning, t.content, t.tool_calls};
}

inline ChainResult run_stream(const std::vector<std::string_view>& chunks, ThinkingStart start,
                              const nlohmann::json& tools) {
  ReasoningParser rp(start);
  ToolCallParser tp(tools, counter_ids());
  std::string reasoning, content;
  DeltaCollector calls;
  for (std::string_view chunk : chunks) {
    ReasoningDelta rd = rp.push(chunk);
    reasoning += rd.reasoning;
    calls.add(tp.push(rd.content), content);
  }
  ReasoningDelta rd = rp.finish();
  reasoning += rd.reasoning;
  calls.add(tp.push(rd.content), content);
  calls.add(tp.finish(), content);
  ChainResult out;
  if (!reasoning.empty()) out.reasoning = reasoning;
  out.content = content;
  out.tool_calls = calls.calls;
  return out;
}

// `text` cut at the given (sorted, in-range) byte offsets.
inline std::vector<std::string_view> split_at(std::string_view text, const std::vector<size_t>& cuts) {
  std::vector<std::string_view> out;
  size_t prev = 0;
  for (size_t c : cuts) {
    out.push_back(text.substr(prev, c - prev));
    prev = c;
  }
  out.push_back(text.substr(prev));
  return out;
}

inline std::vector<std::string_view> bytes_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size(); ++i) out.push_back(text.substr(i, 1));
  return out;
}

inline std::vector<size_t> random_cuts(size_t size, std::mt19937& rng) {
  std::vector<size_t> cuts;
  if (size < 2) return cuts;
  size_t n = rng() % 12 + 1;
  for (size_t i = 0; i < n; ++i) cuts.push_back(rng() % (size + 1));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

inline bool valid_utf8(std::string_view s) {
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

inline ThinkingStart start_from_name(const std::string& mode) {
  return thinking_start_for_mode(mode);
}

}  // namespace m3::test
