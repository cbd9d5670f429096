// A testing backend whose output is scripted, not computed: it loads only config.json and tokenizer.json of a
// model directory plus a script [{"match": "...", "output": "..."}], and makes every sequence emit the output
// of the first rule whose match is a substring of its decoded prompt, then EOS forever. Lets the server's
// end-to-end tests exercise reasoning, tool calls and stop handling with exact, known model text.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/backend.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct ScriptRule {
  std::string match;            // substring of the decoded prompt; "" matches every prompt
  std::vector<int32_t> output;  // the scripted text, encoded with special tokens parsed
};

class ScriptedBackend : public ModelBackend {
 public:
  // Reads MODEL_DIR/config.json, MODEL_DIR/tokenizer.json and the script; errors name the file and rule.
  ScriptedBackend(const std::string& model_dir, const std::string& script_path, int num_kv_pages,
                  int num_host_kv_pages = 0);

  const ModelConfig& config() const override { return config_; }
  const char* device_name() const override { return "scripted"; }
  int num_kv_pages() const override { return num_kv_pages_; }
  int num_host_kv_pages() const override { return num_host_kv_pages_; }
  // Logits rows are 0 for the scripted next token and -1e9 elsewhere; no KV is stored.
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) override;

  const std::vector<ScriptRule>& rules() const { return rules_; }
  // The output the script gives for a prompt (empty when no rule matches: the sequence emits EOS at once).
  const std::vector<int32_t>& output_for(const std::vector<int32_t>& prompt) const;

 private:
  struct SeqState {
    size_t prompt_len = 0;  // set when the first logits row is asked for
    const std::vector<int32_t>* output = nullptr;
  };

  ModelConfig config_;
  Tokenizer tokenizer_;
  std::vector<ScriptRule> rules_;
  int num_kv_pages_ = 0, num_host_kv_pages_ = 0;
  int32_t eos_ = 0;
  static constexpr size_t kMaxSequences = 4096;         // states kept (by id; the engine never reuses one)
  std::map<int32_t, std::vector<int32_t>> pages_;       // page -> the token in each slot (-1: never written)
  std::map<int32_t, std::vector<int32_t>> host_pages_;  // host tier slot -> the same
  std::map<int64_t, SeqState> seqs_;                    // by ForwardBatch seq_id
};

}  // namespace m3
