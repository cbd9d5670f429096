// Front-end dispatch for structured output specs and the compiled-grammar cache.
#include "grammar/structured_output.h"

#include <chrono>

#include "common/error.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace m3::grammar {

std::string StructuredOutputSpec::key() const {
  nlohmann::ordered_json k = {{"kind", static_cast<int>(kind)}, {"ws", any_whitespace}};
  switch (kind) {
    case Kind::kJsonSchema:
      k["schema"] = schema;
      k["strict"] = strict;
      break;
    case Kind::kJsonObject:
      break;
    case Kind::kRegex:
    case Kind::kGrammar:
      k["text"] = text;
      break;
    case Kind::kChoice:
      k["choices"] = choices;
      break;
    case Kind::kToolCall: {
      nlohmann::ordered_json tools_json = nlohmann::ordered_json::array();
      for (const ToolSpec& t : tools) tools_json.push_back({t.name, t.parameters});
      k["tools"] = std::move(tools_json);
      k["only"] = only_tool;
      k["parallel"] = parallel;
      k["content_first"] = content_first;
      break;
    }
  }
  return k.dump();
}

Grammar build_grammar(const StructuredOutputSpec& spec) {
  JsonGrammarOptions json_options;
  json_options.any_whitespace = spec.any_whitespace;
  json_options.strict = spec.strict;
  switch (spec.kind) {
    case StructuredOutputSpec::Kind::kJsonSchema:
      return json_schema_grammar(spec.schema, json_options);
    case StructuredOutputSpec::Kind::kJsonObject:
      return any_json_grammar(json_options);
    case StructuredOutputSpec::Kind::kRegex:
      return regex_grammar(spec.text);
    case StructuredOutputSpec::Kind::kGrammar:
      return parse_ebnf(spec.text);
    case StructuredOutputSpec::Kind::kChoice: {
      if (spec.choices.empty()) fail(ErrorKind::kInvalidArgument, "choice: the list of choices is empty");
      Grammar g;
      const int32_t root = g.add_rule("root");
      for (const std::string& c : spec.choices) g.add_alternative(root, g.literal(c));
      g.set_root(root);
      g.validate();
      return g;
    }
    case StructuredOutputSpec::Kind::kToolCall:
      return tool_call_grammar(spec.tools, spec.only_tool, spec.parallel, spec.content_first);
  }
  fail(ErrorKind::kInternal, "unknown structured output kind");
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> tool_call_specials,
                           size_t capacity)
    : vocab_(std::move(vocab)), tool_call_specials_(std::move(tool_call_specials)), capacity_(capacity) {}

std::shared_ptr<const TokenGrammar> GrammarCache::get(const StructuredOutputSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Grammar g = build_grammar(spec);
  const bool tool_call = spec.kind == StructuredOutputSpec::Kind::kToolCall;
  auto compiled = TokenGrammar::compile(g, vocab_, tool_call ? tool_call_specials_ : std::vector<int32_t>{});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.misses;
  stats_.compile_seconds += seconds;
  if (const auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace m3::grammar
