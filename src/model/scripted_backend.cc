// Script loading and the per-sequence replay: a sequence's history is rebuilt from the chunks the engine
// feeds, written into per-page token slots as a KV cache would hold them (so pages shared by prefix caching
// read back right); the rule is chosen when a sequence (by its engine id) first asks for logits, i.e. once
// the whole prompt has been seen, and a preempted sequence carries on where it was.
#include "model/scripted_backend.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace {

constexpr float kOff = -1e9f;

}  // namespace

ScriptedBackend::ScriptedBackend(const std::string& model_dir, const std::string& script_path,
                                 int num_kv_pages, int num_host_kv_pages)
    : config_(load_model_config(model_dir)),
      tokenizer_(Tokenizer::load(model_dir)),
      num_kv_pages_(num_kv_pages),
      num_host_kv_pages_(num_host_kv_pages) {
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
  for (const KvPageCopy& cp : batch.page_copies) {  // the host tier: slots hold token slots too
    M3_CHECK(
        cp.page >= 0 && cp.page < num_kv_pages_ && cp.host_slot >= 0 && cp.host_slot < num_host_kv_pages_,
        "a page copy names an invalid page or host slot");
    if (cp.to_host)
      host_pages_[cp.host_slot] = pages_[cp.page];
    else
      pages_[cp.page] = host_pages_[cp.host_slot];
  }
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
    const int64_t P = page_size(), end = c.start_pos + c.num_tokens;
    M3_CHECK(static_cast<int64_t>(c.block_table.size()) * P >= end, "a chunk's pages do not cover it");
    for (int64_t pos = c.start_pos; pos < end; ++pos) {  // the "KV" write: tokens into their page slots
      const int32_t page = c.block_table[size_t(pos / P)];
      std::vector<int32_t>& slots = pages_[page];
      slots.resize(size_t(P), -1);
      slots[size_t(pos % P)] = batch.token_ids[size_t(c.token_offset + (pos - c.start_pos))];
    }
    if (!c.want_logits) continue;
    auto found = seqs_.find(c.seq_id);
    SeqState* s = found == seqs_.end() ? nullptr : &found->second;
    if (!s) {  // the first logits row: everything known so far is the prompt
      std::vector<int32_t> prompt(static_cast<size_t>(end));
      for (int64_t pos = 0; pos < end; ++pos) {
        const auto page = pages_.find(c.block_table[size_t(pos / P)]);
        M3_CHECK(page != pages_.end() && page->second[size_t(pos % P)] >= 0,
                 "scripted backend: a prompt token was never written to its page");
        prompt[size_t(pos)] = page->second[size_t(pos % P)];
      }
      if (seqs_.size() >= kMaxSequences) seqs_.erase(seqs_.begin());  // the oldest ids are long finished
      s = &seqs_[c.seq_id];
      *s = SeqState{size_t(end), &output_for(prompt)};
    }
    const size_t k = size_t(end) - s->prompt_len;  // tokens generated (and fed back) so far
    const int32_t next = k < s->output->size() ? (*s->output)[k] : eos_;
    out.logits[row * static_cast<size_t>(out.vocab) + static_cast<size_t>(next)] = 0.f;
    ++row;
  }
  return out;
}

}  // namespace m3
