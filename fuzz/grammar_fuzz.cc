// Fuzz target for the structured-output engine: the input builds a random JSON schema (byte-driven: types,
// bounds, enums, nested objects and arrays, anyOf, recursion through $defs) and then steers a walk through
// the tokens its mask allows, over a small vocabulary of JSON-shaped pieces. Traps unless the cached mask
// equals the exact per-token check at every state, the mask is never empty (no dead end), every allowed token
// is accepted, and every walk that takes the stop token has written valid JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace {

using nlohmann::ordered_json;

struct Bytes {
  const uint8_t* p;
  size_t n, i = 0;
  uint8_t next() { return i < n ? p[i++] : 0; }
};

ordered_json schema(Bytes& in, int depth) {
  const int kind = in.next() % (depth >= 3 ? 6 : 10);
  switch (kind) {
    case 0:
      return {{"type", "string"}, {"maxLength", in.next() % 6}};
    case 1: {
      const int lo = static_cast<int8_t>(in.next());
      return {{"type", "integer"}, {"minimum", lo}, {"maximum", lo + in.next() % 300}};
    }
    case 2:
      return {{"type", "boolean"}};
    case 3:
      return {{"enum", ordered_json::array({"a", 7, nullptr, "b\"c"})}};
    case 4:
      return {{"type", "number"}, {"minimum", 0}};
    case 5:
      return {{"type", "null"}};
    case 6: {
      ordered_json props = ordered_json::object(), required = ordered_json::array();
      for (int k = 0, n = 1 + in.next() % 3; k < n; ++k) {
        const std::string name = std::string(1, static_cast<char>('p' + k));
        props[name] = schema(in, depth + 1);
        if (in.next() % 2) required.push_back(name);
      }
      return {
          {"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
    }
    case 7:
      return {{"type", "array"}, {"items", schema(in, depth + 1)}, {"maxItems", in.next() % 4}};
    case 8:
      return {{"anyOf", ordered_json::array({schema(in, depth + 1), schema(in, depth + 1)})}};
    default:
      return {{"$ref", "#/$defs/leaf"}};
  }
}

std::shared_ptr<const m3::grammar::Vocabulary> vocab() {
  static const auto v = [] {
    std::vector<std::string> bytes;
    // Printable ASCII (and tab, newline) spells every JSON text; a small vocabulary keeps the exact check of
    // every token at every state cheap enough for a sanitizer build.
    for (int b = 0; b < 128; ++b)
      bytes.push_back(b >= 0x20 || b == '\t' || b == '\n' ? std::string(1, static_cast<char>(b))
                                                          : std::string());
    for (const char* piece :
         {"{\"", "\":", "\": ", "\", \"", "\"}",  "\"]",     "[\"",  "true", "false", "null",   "12",
          "-3",  "0.5", "e+1",  "ab",     "\\\"", "\\u00e9", "}, {", "], [", "\"p\"", "\"q\":", "a\""})
      bytes.push_back(piece);
    bytes.push_back("");  // the stop id
    std::vector<char> special(bytes.size(), 0);
    special.back() = 1;
    return std::make_shared<const m3::grammar::Vocabulary>(bytes, special,
                                                           std::vector<int32_t>{int32_t(bytes.size() - 1)});
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  ordered_json s = schema(in, 0);
  s["$defs"] = {{"leaf", {{"type", "array"}, {"items", {{"$ref", "#/$defs/leaf"}}}, {"maxItems", 2}}}};
  std::shared_ptr<const m3::grammar::TokenGrammar> g;
  try {
    m3::grammar::JsonGrammarOptions o;
    o.any_whitespace = in.next() % 2;
    o.max_whitespace = 2;
    g = m3::grammar::TokenGrammar::compile(m3::grammar::json_schema_grammar(s, o), vocab(), {}, 1);
  } catch (const m3::Error&) {
    return 0;  // a schema the compiler refuses (e.g. nothing matches it)
  }
  const auto& v = g->vocab();
  const int32_t stop = v.stop_ids()[0];
  m3::grammar::Matcher m = g->matcher();
  std::vector<uint32_t> mask(v.words());
  std::string text;
  for (int step = 0; step < 40; ++step) {
    g->fill_mask(m, mask.data());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.size(); ++id) {
      const bool bit = (mask[id >> 5] >> (id & 31)) & 1;
      if (bit != g->allows(m, id)) __builtin_trap();  // the cache disagrees with the exact check
      if (bit) allowed.push_back(id);
    }
    if (allowed.empty()) __builtin_trap();  // a dead end
    const int32_t pick = allowed[in.next() % allowed.size()];
    if (pick == stop) {
      if (!nlohmann::json::accept(text)) __builtin_trap();  // the grammar let invalid JSON end
      return 0;
    }
    if (!m.accept(v.bytes(pick))) __builtin_trap();
    text += v.bytes(pick);
  }
  return 0;
}
