// Engine: request validation, stop conditions, seeded sampling independent of batch composition, and a pool
// too small for all requests at once (preemption by recompute gives the same greedy output).
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "engine/engine.h"
#include "support/model_fixtures.h"
#include "support/requests.h"

namespace m3::testing {
namespace {

std::map<int64_t, std::vector<int32_t>> run_all(Engine& e) {
  std::map<int64_t, std::vector<int32_t>> out;
  while (e.has_work())
    for (const TokenEvent& ev : e.step()) out[ev.request_id].push_back(ev.token);
  return out;
}

TEST(Engine, RejectsBadRequestsWithNamedErrors) {
  Engine e(load_fixture("m3-tiny-msa", 8), {});  // 8 pages of 8 tokens: max_model_len 64
  EXPECT_EQ(e.max_model_len(), 64);
  auto error_of = [&](Request r) -> std::string {
    try {
      e.add(std::move(r));
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument);
      return err.what();
    }
    return "";
  };
  EXPECT_NE(error_of(greedy({}, 4)).find("empty"), std::string::npos);
  EXPECT_NE(error_of(greedy({1, 99999}, 4)).find("99999"), std::string::npos);
  EXPECT_NE(error_of(greedy({1, 2}, 63)).find("maximum model length 64"), std::string::npos);
  EXPECT_NE(error_of(greedy({1, 2}, 0)).find("max_tokens"), std::string::npos);
  Request r = greedy({1}, 2);
  r.sampling.top_p = 0;
  EXPECT_NE(error_of(r).find("top_p"), std::string::npos);
  r = greedy({1}, 2);
  r.sampling.temperature = -1;
  EXPECT_NE(error_of(r).find("temperature"), std::string::npos);
  EXPECT_FALSE(e.has_work()) << "rejected requests leave no trace";
}

TEST(Engine, StopTokenAndLengthFinishReasons) {
  Engine e(load_fixture("m3-tiny-msa"), {});
  auto golden = load_golden("m3-tiny-msa");
  Request r = greedy(golden[3].prompt, 12);
  r.stop_token_ids = {golden[3].output[4]};
  int64_t id = e.add(r);
  std::vector<TokenEvent> events;
  while (e.has_work())
    for (const TokenEvent& ev : e.step()) events.push_back(ev);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().request_id, id);
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(events[i].finish, FinishReason::kNone);
  int64_t id2 = e.add(greedy(golden[0].prompt, 3));
  auto out = run_all(e);
  EXPECT_EQ(out[id2].size(), 3u);
}

TEST(Engine, SeededSamplingDoesNotDependOnTheBatch) {
  auto sampled = [](bool crowded) {
    Engine e(load_fixture("m3-tiny-msa"), {});
    Request r;
    r.prompt = {5, 6, 7, 8, 9};
    r.max_tokens = 10;
    r.seed = 1234;
    r.ignore_eos = true;
    int64_t id = e.add(r);
    if (crowded)
      for (int i = 0; i < 3; ++i) e.add(greedy({int32_t(10 + i), 3, 4}, 7));
    return run_all(e)[id];
  };
  EXPECT_EQ(sampled(false), sampled(true));
}

TEST(Engine, SmallPoolPreemptsAndStillMatchesReference) {
  auto golden = load_golden("m3-tiny-msa");
  EngineOptions o;
  o.max_num_batched_tokens = 16;
  Engine e(load_fixture("m3-tiny-msa", 20), o);  // 160 tokens of KV for ~300 tokens of work
  std::map<int64_t, size_t> which;
  for (size_t p = 0; p < golden.size(); ++p) which[e.add(greedy(golden[p].prompt, golden[p].max_tokens))] = p;
  auto out = run_all(e);
  for (const auto& [id, p] : which) {
    size_t clear = 0;
    while (clear < golden[p].steps.size() && golden[p].steps[clear].margin >= 1e-3f) ++clear;
    std::vector<int32_t> want(golden[p].output.begin(), golden[p].output.begin() + clear);
    std::vector<int32_t> got(out[id].begin(), out[id].begin() + std::min(clear, out[id].size()));
    EXPECT_EQ(got, want) << "prompt " << p;
  }
}

}  // namespace
}  // namespace m3::testing

namespace m3::testing {
namespace {

TEST(Engine, MinTokensMasksStopTokensAndLogprobsAreReported) {
  Engine e(load_fixture("m3-tiny-msa"), {});
  auto golden = load_golden("m3-tiny-msa");
  Request r;
  r.prompt = golden[3].prompt;
  r.max_tokens = 6;
  r.min_tokens = 4;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.stop_token_ids = {golden[3].output[0]};  // would stop at once without min_tokens
  r.sampling.logprobs = 3;
  e.add(r);
  std::vector<TokenEvent> events;
  while (e.has_work())
    for (TokenEvent& ev : e.step()) events.push_back(std::move(ev));
  ASSERT_GE(events.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NE(events[i].token, golden[3].output[0]) << "banned before min_tokens";
  for (const TokenEvent& ev : events) {
    ASSERT_TRUE(ev.logprobs.has_value());
    EXPECT_EQ(ev.logprobs->top.size(), 3u);
    EXPECT_LE(ev.logprobs->logprob, 0.0f);
    EXPECT_GE(ev.logprobs->top[0].second, ev.logprobs->top[2].second);
  }
}

}  // namespace
}  // namespace m3::testing
