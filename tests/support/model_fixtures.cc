// Fixture loading and the hand-driven runner.
#include "support/model_fixtures.h"

#include <algorithm>

#include <cmath>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace m3::testing {

std::string fixture_model_dir(const std::string& name) {
  return "tests/fixtures/models/" + name;
}

std::vector<GoldenPrompt> load_golden(const std::string& name) {
  std::ifstream in("tests/fixtures/goldens/" + name + ".json");
  EXPECT_TRUE(in.good()) << "missing golden " << name;
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenPrompt> out;
  for (const auto& p : j["prompts"]) {
    GoldenPrompt g;
    g.prompt = p["prompt_token_ids"].get<std::vector<int32_t>>();
    g.max_tokens = p["max_tokens"].get<int>();
    g.output = p["output_token_ids"].get<std::vector<int32_t>>();
    for (const auto& s : p["steps"])
      g.steps.push_back({s["top_ids"].get<std::vector<int32_t>>(), s["top_logits"].get<std::vector<float>>(),
                         s["margin"].get<float>()});
    g.prefill_last_logits = p["prefill_last_logits"].get<std::vector<float>>();
    if (p.contains("hidden_last")) g.hidden_last = p["hidden_last"].get<std::vector<std::vector<float>>>();
    out.push_back(std::move(g));
  }
  return out;
}

std::unique_ptr<ModelBackend> load_fixture(const std::string& name, int num_pages,
                                           const std::string& quantization, const std::string& kv_cache_dtype,
                                           int num_host_kv_pages) {
  BackendOptions o;
  o.device = "cpu";
  o.num_kv_pages = num_pages;
  o.quantization = quantization;
  o.kv_cache_dtype = kv_cache_dtype;
  o.num_host_kv_pages = num_host_kv_pages;
  return load_backend(fixture_model_dir(name), o);
}

std::unique_ptr<ModelBackend> load_cpu_rank(const std::string& name, std::shared_ptr<dist::Communicator> comm,
                                            bool expert_parallel, int data_parallel) {
  BackendOptions o;
  o.device = "cpu";
  o.num_kv_pages = 256;
  o.expert_parallel = expert_parallel;
  o.data_parallel = data_parallel;
  o.comm = std::move(comm);
  return load_shard(fixture_model_dir(name), o);
}

std::vector<int32_t> random_prompt(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(size_t(std::max(n, 0)));
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(vocab));
  return p;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

int SequenceRunner::add_sequence(int dp_rank) {
  seqs_.emplace_back();
  seqs_.back().dp_rank = dp_rank;
  return static_cast<int>(seqs_.size()) - 1;
}

int SequenceRunner::fork_sequence(int from, int pages) {
  const Seq& f = seqs_.at(from);
  EXPECT_LE(int64_t(pages) * model_.page_size(), f.len) << "fork past what the sequence computed";
  Seq s;
  s.dp_rank = f.dp_rank;
  s.pages.assign(f.pages.begin(), f.pages.begin() + pages);
  s.len = int64_t(pages) * model_.page_size();
  seqs_.push_back(std::move(s));
  return static_cast<int>(seqs_.size()) - 1;
}

std::vector<std::vector<float>> SequenceRunner::step(
    const std::vector<std::pair<int, std::vector<int32_t>>>& work, const ForwardOptions& options,
    ForwardOutput* raw) {
  const int page = model_.page_size();
  ForwardBatch batch;
  for (const auto& [id, tokens] : work) {
    Seq& s = seqs_.at(id);
    while (static_cast<int64_t>(s.pages.size()) * page < s.len + static_cast<int64_t>(tokens.size())) {
      int32_t& next = next_page_[s.dp_rank];
      EXPECT_LT(next, model_.num_kv_pages()) << "test ran out of KV pages";
      s.pages.push_back(next++);
    }
  }
  for (const auto& [id, tokens] : work) {
    Seq& s = seqs_.at(id);
    SeqChunk c;
    c.token_offset = static_cast<int32_t>(batch.token_ids.size());
    c.num_tokens = static_cast<int32_t>(tokens.size());
    c.start_pos = s.len;
    c.block_table = s.pages;
    c.want_logits = true;
    c.seq_id = id;
    c.dp_rank = s.dp_rank;
    batch.token_ids.insert(batch.token_ids.end(), tokens.begin(), tokens.end());
    batch.seqs.push_back(c);
    s.len += static_cast<int64_t>(tokens.size());
  }
  ForwardOutput out = model_.forward(batch, options);
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < work.size(); ++r)
    rows.emplace_back(out.logits.begin() + r * out.vocab, out.logits.begin() + (r + 1) * out.vocab);
  if (raw) *raw = std::move(out);
  return rows;
}

std::vector<std::vector<std::vector<float>>> golden_steps_on_ranks(ModelBackend& model,
                                                                   const std::vector<GoldenPrompt>& golden,
                                                                   const std::vector<int>& owner) {
  SequenceRunner seqs(model);
  std::vector<int> order(golden.size());
  for (size_t p = 0; p < golden.size(); ++p) order[p] = int(p);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return owner[a] < owner[b]; });
  std::vector<int> id(golden.size());
  for (size_t p = 0; p < golden.size(); ++p) id[p] = seqs.add_sequence(owner[p]);
  std::vector<std::vector<std::vector<float>>> logits;
  for (int s = -1; s < 3; ++s) {
    std::vector<std::pair<int, std::vector<int32_t>>> work;
    for (int p : order)
      work.push_back({id[p], s < 0 ? golden[p].prompt : std::vector<int32_t>{golden[p].output[s]}});
    const auto rows = seqs.step(work);
    std::vector<std::vector<float>> by_prompt(golden.size());
    for (size_t i = 0; i < order.size(); ++i) by_prompt[order[i]] = rows[i];
    logits.push_back(std::move(by_prompt));
  }
  return logits;
}

}  // namespace m3::testing
