// Structured output requests as the server hands them over: which front end (JSON schema, any JSON object,
// regex, choice list, EBNF grammar, MiniMax-M3 tool calls) with its input, compiled against the vocabulary
// and cached by content, so an agent that sends the same schema every turn compiles it once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "grammar/tool_call_grammar.h"

namespace m3::grammar {

struct StructuredOutputSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kToolCall };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema (ordered: properties keep their order)
  bool strict = false;               // kJsonSchema: OpenAI strict (additionalProperties default false)
  bool any_whitespace = true;        // JSON kinds: free whitespace between tokens, else json.dumps style
  std::string text;                  // kRegex: the pattern; kGrammar: the EBNF text
  std::vector<std::string> choices;  // kChoice
  std::vector<ToolSpec> tools;       // kToolCall
  std::string only_tool;             // kToolCall: every call names this tool ("" = any)
  bool parallel = true;              // kToolCall: more than one call allowed
  bool content_first = false;  // kToolCall: prose may come first and the block is optional (auto choice)

  // The canonical text of the spec: the cache key.
  std::string key() const;
};

// The grammar of a spec. Throws m3::Error(kInvalidArgument) naming what the front end refuses.
Grammar build_grammar(const StructuredOutputSpec& spec);

struct GrammarCacheStats {
  int64_t hits = 0, misses = 0;
  double compile_seconds = 0;
};

// Compiled grammars by spec, least recently used first out. Thread-safe; a compile runs outside the lock
// (two threads missing on one spec both compile it, and the second result is dropped). Errors are not
// cached.
class GrammarCache {
 public:
  // `tool_call_specials`: the special ids the tool-call markup may use as single tokens.
  GrammarCache(std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> tool_call_specials,
               size_t capacity = 128);
  std::shared_ptr<const TokenGrammar> get(const StructuredOutputSpec& spec);
  GrammarCacheStats stats() const;
  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const TokenGrammar>>;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<int32_t> tool_call_specials_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  GrammarCacheStats stats_;
};

}  // namespace m3::grammar
