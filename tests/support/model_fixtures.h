// Test support: the golden fixtures written by tools/goldens/make_goldens.py (tiny random checkpoints plus
// transformers outputs), and SequenceRunner, which drives a backend directly with hand-managed KV pages so
// tests can choose any batching and chunking.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/backend.h"

namespace m3::testing {

inline const char* kFixtureNames[] = {"m3-tiny-msa",   "m3-tiny-hf-sharded", "m3-tiny-text-sharded",
                                      "m3-tiny-mxfp8", "m3-tiny-block128",   "m3-tiny-mxfp8-block128"};

std::string fixture_model_dir(const std::string& name);

struct GoldenStep {
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
  float margin = 0;  // reference top-1 minus top-2 logit
};

struct GoldenPrompt {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  std::vector<int32_t> output;  // reference greedy ids
  std::vector<GoldenStep> steps;
  std::vector<float> prefill_last_logits;
  std::vector<std::vector<float>> hidden_last;  // after embedding and each layer (may be empty)
};

std::vector<GoldenPrompt> load_golden(const std::string& name);

// quantization, kv_cache_dtype: BackendOptions' ("fp8": linear weights quantised to MXFP8 at load; an FP8 KV
// cache).
std::unique_ptr<ModelBackend> load_fixture(const std::string& name, int num_pages = 256,
                                           const std::string& quantization = "",
                                           const std::string& kv_cache_dtype = "auto",
                                           int num_host_kv_pages = 0);

// One CPU rank's shard of fixture `name` (256 KV pages) over `comm`: tensor parallel, with the experts split
// by expert when expert_parallel, or DEP over all the ranks when data_parallel > 1.
std::unique_ptr<ModelBackend> load_cpu_rank(const std::string& name, std::shared_ptr<dist::Communicator> comm,
                                            bool expert_parallel = false, int data_parallel = 1);

// n token ids drawn uniformly from the vocabulary (mt19937 seeded with `seed`).
std::vector<int32_t> random_prompt(int n, int vocab, uint32_t seed);

// ||a - b|| / ||b||
double rel_error(const std::vector<float>& a, const std::vector<float>& b);

class SequenceRunner {
 public:
  explicit SequenceRunner(ModelBackend& model) : model_(model) {}
  // dp_rank: the data-parallel attention rank that holds it (each rank has its own pages); a step's work
  // must list its sequences in rank order.
  int add_sequence(int dp_rank = 0);
  // A new sequence whose first `pages` KV pages are `from`'s (as prefix caching shares them): it starts at
  // position pages x page_size, and its later pages are its own.
  int fork_sequence(int from, int pages);
  // One forward pass appending each listed sequence's tokens; returns the last-token logits of each, in
  // order.
  std::vector<std::vector<float>> step(const std::vector<std::pair<int, std::vector<int32_t>>>& work,
                                       const ForwardOptions& options = {}, ForwardOutput* raw = nullptr);

 private:
  struct Seq {
    std::vector<int32_t> pages;
    int64_t len = 0;
    int dp_rank = 0;
  };
  ModelBackend& model_;
  std::vector<Seq> seqs_;
  std::map<int, int32_t> next_page_;  // per data-parallel rank
};

// Prefills every golden prompt in one batch (prompt p held by data-parallel rank owner[p]), then decodes
// three teacher-forced steps; returns the logits [step][prompt][vocab]. The work is listed in rank order, as
// the engine groups it.
std::vector<std::vector<std::vector<float>>> golden_steps_on_ranks(ModelBackend& model,
                                                                   const std::vector<GoldenPrompt>& golden,
                                                                   const std::vector<int>& owner);

}  // namespace m3::testing
