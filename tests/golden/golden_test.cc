// The CPU backend against transformers' outputs on checkpoints it never wrote (tests/fixtures/goldens, from
// tools/goldens/make_goldens.py on the GPU machine). Logits are compared teacher-forced (the reference's own
// tokens are fed back), so every step is checked even past a near-tie; greedy ids must match while the
// reference's top-1/top-2 margin is at least 1e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/engine.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

constexpr double kLogitTol = 1e-4;
constexpr float kMarginTol = 1e-3f;

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<float> gather(const std::vector<float>& logits, const std::vector<int32_t>& ids) {
  std::vector<float> out;
  for (int32_t i : ids) out.push_back(logits.at(i));
  return out;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, TeacherForcedLogitsMatchReference) {
  auto model = load_fixture(GetParam());
  auto golden = load_golden(GetParam());
  SequenceRunner run(*model);
  std::vector<std::pair<int, std::vector<int32_t>>> work;
  for (const auto& g : golden) work.push_back({run.add_sequence(), g.prompt});
  auto logits = run.step(work);  // all prompts prefilled in one batch

  for (size_t p = 0; p < golden.size(); ++p)
    EXPECT_LT(rel_error(logits[p], golden[p].prefill_last_logits), kLogitTol) << "prompt " << p << " prefill";

  std::vector<size_t> active;  // prompt of each logits row
  for (size_t p = 0; p < golden.size(); ++p) active.push_back(p);
  for (size_t s = 0; !active.empty(); ++s) {
    std::vector<std::pair<int, std::vector<int32_t>>> next;
    std::vector<size_t> next_active;
    for (size_t row = 0; row < active.size(); ++row) {
      const size_t p = active[row];
      const GoldenStep& ref = golden[p].steps[s];
      EXPECT_LT(rel_error(gather(logits[row], ref.top_ids), ref.top_logits), kLogitTol)
          << "prompt " << p << " step " << s;
      if (ref.margin >= kMarginTol) {
        EXPECT_EQ(argmax(logits[row]), ref.top_ids[0]) << "prompt " << p << " step " << s;
      }
      if (s + 1 < golden[p].steps.size()) {
        next.push_back({static_cast<int>(p), {golden[p].output[s]}});  // sequence p was added p-th
        next_active.push_back(p);
      }
    }
    if (!next.empty()) logits = run.step(next);
    active = next_active;
  }
}

TEST_P(GoldenTest, HiddenStatesPerLayerMatchReference) {
  auto model = load_fixture(GetParam());
  auto golden = load_golden(GetParam());
  const GoldenPrompt& g = golden.back();
  ASSERT_FALSE(g.hidden_last.empty()) << "the generator records per-layer states for the last prompt";
  SequenceRunner run(*model);
  ForwardOutput out;
  ForwardOptions opt;
  opt.trace_hidden = true;
  run.step({{run.add_sequence(), g.prompt}}, opt, &out);
  ASSERT_EQ(out.hidden_trace.size(), 1u);
  ASSERT_EQ(out.hidden_trace[0].size(), g.hidden_last.size());
  // hidden_states[-1] of transformers is after the final norm; the others are raw residual streams.
  for (size_t l = 0; l + 1 < g.hidden_last.size(); ++l)
    EXPECT_LT(rel_error(out.hidden_trace[0][l], g.hidden_last[l]), kLogitTol) << "after layer " << l;
}

TEST_P(GoldenTest, GreedyGenerationThroughEngineMatchesReference) {
  EngineOptions eo;
  eo.max_num_batched_tokens = 64;  // forces chunked prefill across several steps
  Engine engine(load_fixture(GetParam()), eo);
  auto golden = load_golden(GetParam());
  std::map<int64_t, size_t> index;
  for (size_t p = 0; p < golden.size(); ++p) {
    Request r;
    r.prompt = golden[p].prompt;
    r.max_tokens = golden[p].max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    index[engine.add(r)] = p;
  }
  std::vector<std::vector<int32_t>> outputs(golden.size());
  while (engine.has_work())
    for (const TokenEvent& e : engine.step()) outputs[index[e.request_id]].push_back(e.token);
  for (size_t p = 0; p < golden.size(); ++p) {
    ASSERT_EQ(outputs[p].size(), golden[p].output.size());
    for (size_t s = 0; s < outputs[p].size(); ++s) {
      if (golden[p].steps[s].margin < kMarginTol) break;  // beyond a near-tie both continuations are valid
      EXPECT_EQ(outputs[p][s], golden[p].output[s]) << "prompt " << p << " step " << s;
      if (outputs[p][s] != golden[p].output[s]) break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(kFixtureNames), [](const auto& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

}  // namespace
}  // namespace m3::testing
