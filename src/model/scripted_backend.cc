// Script loading and the per-sequence replay: a sequence's history is rebuilt from the chunks the engine
// feeds (keyed by block_table[0], reset when a chunk starts at position 0); the rule is chosen when the first
// logits row is requested, i.e. once the whole prompt has been seen.
#include "model/scripted_backend.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace {

constexpr float kOff = -1e9f;

}  // namespace

ScriptedBackend::ScriptedBackend(const std::string& model_dir, const std::string& script_path,
                                 int num_kv_pages)
    : config_(load_model_config(model_dir)),
      tokenizer_(Tokenizer::load(model_dir)),
      num_kv_pages_(num_kv_pages) {
  if (config_.eos_token_ids.empty())
    fail(ErrorKind::kCorruptData, model_dir + "/config.json: the scripted backend needs eos_token_id");
  eos_ = config_.eos_token_ids[0];
  std::ifstream in(script_path);
  if (!in) fail(ErrorKind::kNotFound, script_path + ": cannot open the response script");
  const nlohmann::json script = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (script.is_discarded() || !script.is_array())
    fail(ErrorKind::kCorruptData,
         script_path + ": the response script must be a JSON list of {\"match\", \"output\"} objects");
  for (size_t i = 0; i < script.size(); ++i) {
    const auto& r = script[i];
    const std::string where = script_path + ": rule " + std::to_string(i);
    if (!r.is_object() || !r.contains("output") || !r["output"].is_string() ||
        (r.contains("match") && !r["match"].is_string()))
      fail(ErrorKind::kCorruptData, where + " needs a string \"output\" (and an optional string \"match\")");
    ScriptRule rule;
    rule.match = r.value("match", "");
    rule.output = tokenizer_.encode(r["output"].get<std::string>(), /*parse_special=*/true);
    for (int32_t id : rule.output)
      if (id < 0 || id >= config_.vocab_size)
        fail(ErrorKind::kCorruptData,
             where + ": output token " + std::to_string(id) + " is outside the model's vocabulary");
    rules_.push_back(std::move(rule));
  }
}

const std::vector<int32_t>& ScriptedBackend::output_for(const std::vector<int32_t>& prompt) const {
  static const std::vector<int32_t> kNothing;
  const std::string text = tokenizer_.decode(prompt);
  for (const ScriptRule& r : rules_)
    if (text.find(r.match) != std::string::npos) return r.output;
  return kNothing;
}

ForwardOutput ScriptedBackend::forward(const ForwardBatch& batch, const ForwardOptions&) {
  ForwardOutput out;
  out.vocab = config_.vocab_size;
  size_t rows = 0;
  for (const SeqChunk& c : batch.seqs) rows += c.want_logits ? 1 : 0;
  out.logits.assign(rows * static_cast<size_t>(out.vocab), kOff);
  size_t row = 0;
  for (const SeqChunk& c : batch.seqs) {
    M3_CHECK(!c.block_table.empty(), "a scheduled chunk has no KV pages");
    M3_CHECK(
        c.token_offset >= 0 && c.token_offset + c.num_tokens <= static_cast<int32_t>(batch.token_ids.size()),
        "chunk tokens out of the batch");
    SeqState& s = seqs_[c.block_table[0]];
    if (c.start_pos == 0) s = SeqState{};
    M3_CHECK(static_cast<int64_t>(s.tokens.size()) == c.start_pos,
             "scripted backend: chunk does not continue its sequence (start_pos " +
                 std::to_string(c.start_pos) + ", seen " + std::to_string(s.tokens.size()) + ")");
    s.tokens.insert(s.tokens.end(), batch.token_ids.begin() + c.token_offset,
                    batch.token_ids.begin() + c.token_offset + c.num_tokens);
    if (!c.want_logits) continue;
    if (!s.output) {
      s.prompt_len = s.tokens.size();
      s.output = &output_for(s.tokens);
    }
    const size_t k = s.tokens.size() - s.prompt_len;  // tokens generated (and fed back) so far
    const int32_t next = k < s.output->size() ? (*s.output)[k] : eos_;
    out.logits[row * static_cast<size_t>(out.vocab) + static_cast<size_t>(next)] = 0.f;
    ++row;
  }
  return out;
}

}  // namespace m3
