// Engine: request validation, stop conditions, seeded sampling independent of batch composition and of the
// device that samples (host vs a backend that samples itself, with logprob steps falling back to the host),
// a pool too small for all requests at once (preemption by recompute gives the same greedy output), and
// prefix caching across an agent's turns (the same output and logprobs as without it).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "common/error.h"
#include "engine/engine.h"
#include "support/device_sampling_backend.h"
#include "support/engine_run.h"
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

TEST(Engine, AnExplicitMaxModelLenTheKvPoolCannotHoldIsAStartupError) {
  EngineOptions o;
  o.max_model_len = 65;  // 8 pages of 8 tokens hold 64
  try {
    Engine e(load_fixture("m3-tiny-msa", 8), o);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("--max-model-len 65 is more than the KV cache holds (64 tokens"),
              std::string::npos)
        << err.what();
  }
  o.max_model_len = 64;
  EXPECT_EQ(Engine(load_fixture("m3-tiny-msa", 8), o).max_model_len(), 64);
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

// A thinking budget closes the reasoning span with its end token once the span has `budget` tokens; the
// tokens before the cut are the model's own, and a span the prompt opened counts from the first token.
TEST(Engine, ThinkingBudgetForcesTheEndOfTheSpan) {
  auto golden = load_golden("m3-tiny-msa");
  const std::vector<int32_t>& ref = golden[3].output;
  ASSERT_GE(ref.size(), 5u);
  ASSERT_TRUE(ref[2] != ref[1] && ref[3] != ref[1]) << "the fixture's tokens 2-3 must not reopen the span";
  const int32_t end = ref[4] == 7 ? 8 : 7;  // a token the model would not produce at step 4
  {
    Engine e(load_fixture("m3-tiny-msa"), {});
    Request r = greedy(golden[3].prompt, 6);
    r.thinking_budget = ThinkingBudget{2, ref[1], end, false};  // the model "opens" a span at step 1
    const int64_t id = e.add(r);
    auto out = run_all(e)[id];
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 4),
              std::vector<int32_t>(ref.begin(), ref.begin() + 4));
    EXPECT_EQ(out[4], end) << "two span tokens, then the end token";
  }
  {
    Engine e(load_fixture("m3-tiny-msa"), {});
    Request r = greedy(golden[3].prompt, 3);
    r.thinking_budget = ThinkingBudget{0, ref[1] == 5 ? 6 : 5, end, /*starts_inside=*/true};
    const int64_t id = e.add(r);
    EXPECT_EQ(run_all(e)[id][0], end) << "a zero budget in an open span ends it at once";
  }
  Engine e(load_fixture("m3-tiny-msa"), {});
  Request bad = greedy(golden[3].prompt, 3);
  bad.thinking_budget = ThinkingBudget{4, -1, end, false};
  EXPECT_THROW(e.add(bad), Error);
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

namespace m3::testing {
namespace {

Request sampled_request(std::vector<int32_t> prompt, uint64_t seed) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 12;
  r.seed = seed;
  r.ignore_eos = true;
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.95f;
  r.sampling.min_p = 0.01f;
  r.sampling.repetition_penalty = 1.3f;
  r.sampling.presence_penalty = 0.4f;
  r.sampling.frequency_penalty = 0.3f;
  r.sampling.logit_bias = {{7, 3.0f}, {9, -2.0f}};
  return r;
}

TEST(EngineDeviceSampling, RowsCarryTheParamsTheDrawAndTheAdjustments) {
  auto calls = std::make_shared<std::vector<DeviceSamplingBackend::Call>>();
  Engine e(std::make_unique<DeviceSamplingBackend>(load_fixture("m3-tiny-msa"), calls), {});
  Request r = sampled_request({5, 6, 7, 5, 9}, 77);
  r.min_tokens = 3;
  r.stop_token_ids = {11, 12};
  e.add(r);
  std::vector<int32_t> tokens;
  while (e.has_work())
    for (const TokenEvent& ev : e.step()) tokens.push_back(ev.token);
  ASSERT_EQ(calls->size(), tokens.size());
  PenaltyState state;
  state.prompt_tokens = {5, 6, 7, 9};
  for (size_t k = 0; k < calls->size(); ++k) {
    const DeviceSamplingBackend::Call& c = (*calls)[k];
    ASSERT_EQ(c.rows.size(), 1u) << "step " << k;
    ASSERT_EQ(c.logit_rows, 1u);
    const SamplingRow& row = c.rows[0];
    EXPECT_EQ(row.u, sample_uniform(77, k)) << "the draw of output token " << k;
    EXPECT_EQ(row.temperature, 0.9f);
    EXPECT_EQ(row.top_k, 40);
    EXPECT_EQ(row.top_p, 0.95f);
    EXPECT_EQ(row.min_p, 0.01f);
    EXPECT_EQ(row.penalties.repetition, 1.3f);
    EXPECT_EQ(row.penalties.presence, 0.4f);
    EXPECT_EQ(row.penalties.frequency, 0.3f);
    ASSERT_EQ(row.adj_begin, 0);
    ASSERT_EQ(row.adj_end, static_cast<int32_t>(c.adjustments.size()));
    const std::vector<int32_t> banned = k < 3 ? r.stop_token_ids : std::vector<int32_t>{};
    const auto want = logit_adjustments(r.sampling, state, banned, e.config().vocab_size);
    ASSERT_EQ(c.adjustments.size(), want.size()) << "step " << k;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(c.adjustments[i].id, want[i].id);
      EXPECT_EQ(c.adjustments[i].bias, want[i].bias);
      EXPECT_EQ(c.adjustments[i].output_count, want[i].output_count);
      EXPECT_EQ(c.adjustments[i].in_prompt, want[i].in_prompt);
      EXPECT_EQ(c.adjustments[i].banned, want[i].banned);
    }
    ++state.output_counts[tokens[k]];
  }
}

TEST(EngineDeviceSampling, GivesTheHostsTokensAndLogprobStepsSampleOnTheHost) {
  auto run = [](bool device, std::vector<DeviceSamplingBackend::Call>* seen) {
    auto calls = std::make_shared<std::vector<DeviceSamplingBackend::Call>>();
    std::unique_ptr<ModelBackend> backend = load_fixture("m3-tiny-msa");
    if (device) backend = std::make_unique<DeviceSamplingBackend>(std::move(backend), calls);
    Engine e(std::move(backend), {});
    Request with_logprobs = sampled_request({3, 4, 5}, 5);
    with_logprobs.max_tokens = 4;
    with_logprobs.sampling.logprobs = 2;
    std::vector<int64_t> ids = {e.add(sampled_request({1, 2, 3, 4}, 1)), e.add(greedy({8, 9, 10}, 12)),
                                e.add(with_logprobs)};
    std::map<int64_t, std::vector<TokenEvent>> events;
    while (e.has_work())
      for (TokenEvent& ev : e.step()) events[ev.request_id].push_back(std::move(ev));
    if (seen) *seen = *calls;
    std::vector<std::vector<int32_t>> tokens;
    for (int64_t id : ids) {
      tokens.emplace_back();
      for (const TokenEvent& ev : events[id]) tokens.back().push_back(ev.token);
    }
    for (const TokenEvent& ev : events[ids[2]]) EXPECT_TRUE(ev.logprobs.has_value());
    return tokens;
  };
  std::vector<DeviceSamplingBackend::Call> calls;
  const auto on_device = run(true, &calls);
  EXPECT_EQ(on_device, run(false, nullptr));
  EXPECT_EQ(on_device[2].size(), 4u);
  // While the logprobs request runs, whole steps sample on the host (logits returned, no rows); after it, on
  // the device.
  size_t host_steps = 0, device_steps = 0;
  for (const auto& c : calls) {
    if (c.logit_rows == 0) continue;
    if (c.rows.empty()) {
      ++host_steps;
    } else {
      EXPECT_EQ(c.rows.size(), c.logit_rows);
      ++device_steps;
    }
  }
  EXPECT_EQ(host_steps, 4u);
  EXPECT_EQ(device_steps, 8u);
}

TEST(EngineDeviceSampling, SeedsRepeatAndConsecutiveSeedsDiffer) {
  Engine e(load_fixture("m3-tiny-msa"), {});
  Request r = sampled_request({5, 6, 7, 8}, 99);
  r.sampling = SamplingParams{};  // plain temperature 1 over the whole vocabulary
  const int64_t a = e.add(r), b = e.add(r);
  r.seed = 100;  // the second choice of an n = 2 request
  const int64_t c = e.add(r);
  auto out = run_all(e);
  EXPECT_EQ(out[a], out[b]);
  EXPECT_NE(out[a], out[c]);
}

}  // namespace
}  // namespace m3::testing

namespace m3::testing {
namespace {

// Prefix caching: a request whose prompt extends an earlier conversation (prompt + its output + a new turn)
// reuses the earlier request's pages, computes only the rest, and produces exactly what an engine without
// the cache produces: the same greedy tokens and bit-identical logprobs (the cached K/V and index keys are
// the ones recomputation would write).
TEST(Engine, PrefixCachingReusesPagesAndChangesNothing) {
  auto golden = load_golden("m3-tiny-msa");  // page size 8
  struct Turn {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    int32_t cached = 0;
  };
  auto run = [&](bool caching) {
    EngineOptions o;
    o.enable_prefix_caching = caching;
    Engine e(load_fixture("m3-tiny-msa"), o);
    std::vector<Turn> turns;
    std::vector<int32_t> conversation = golden[5].prompt;  // 121 tokens
    for (int t = 0; t < 3; ++t) {
      Request r = greedy(conversation, 6);
      r.sampling.logprobs = 0;
      e.add(r);
      Turn turn;
      while (e.has_work())
        for (const TokenEvent& ev : e.step()) {
          turn.tokens.push_back(ev.token);
          turn.logprobs.push_back(ev.logprobs->logprob);
          turn.cached = ev.cached_tokens;
        }
      conversation.insert(conversation.end(), turn.tokens.begin(), turn.tokens.end());
      conversation.insert(conversation.end(), {int32_t(40 + t), int32_t(41 + t), int32_t(42 + t)});
      turns.push_back(std::move(turn));
    }
    return std::make_pair(turns, e.stats());
  };
  const auto [cached, with] = run(true);
  const auto [plain, without] = run(false);
  for (size_t t = 0; t < plain.size(); ++t) {
    EXPECT_EQ(cached[t].tokens, plain[t].tokens) << "turn " << t;
    EXPECT_EQ(cached[t].logprobs, plain[t].logprobs) << "turn " << t;
    EXPECT_EQ(plain[t].cached, 0);
  }
  EXPECT_EQ(cached[0].cached, 0);
  // Turn 1's prompt: 121 + 6 + 3 = 130 tokens, of which turn 0 computed 126 (its last output token never
  // went through the model): 15 full pages = 120 tokens. Turn 2 (139 tokens): turn 1 computed 130 + 5, 16
  // full pages = 128 tokens.
  EXPECT_EQ(cached[1].cached, 120);
  EXPECT_EQ(cached[2].cached, 128);
  EXPECT_EQ(with.prefix_cache_hits, 120 + 128);
  EXPECT_EQ(with.prefix_cache_queries, 121 + 130 + 139);
  EXPECT_EQ(without.prefix_cache_queries, 0);
}

// Shared pages under aborts and preemption in a small pool: every page comes back, and what is cached stays
// consistent (later requests still reuse it and still match the goldens).
TEST(Engine, PrefixCachingUnderAbortAndPreemptionLeaksNoPages) {
  auto golden = load_golden("m3-tiny-msa");
  EngineOptions o;
  o.max_num_batched_tokens = 16;
  Engine e(load_fixture("m3-tiny-msa", 24), o);  // 192 tokens of KV: preemption is certain
  std::map<int64_t, size_t> which;
  for (int round = 0; round < 2; ++round)
    for (size_t p = 0; p < golden.size(); ++p)
      which[e.add(greedy(golden[p].prompt, golden[p].max_tokens))] = p;
  int steps = 0;
  std::map<int64_t, std::vector<int32_t>> out;
  while (e.has_work()) {
    for (const TokenEvent& ev : e.step()) out[ev.request_id].push_back(ev.token);
    if (++steps == 5) e.abort(3), e.abort(8);  // one mid-prefill or decode, one waiting
  }
  const EngineStats st = e.stats();
  EXPECT_EQ(st.kv_pages_free, st.kv_pages_total) << "pages leaked";
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.prefix_cache_hits, 0) << "the second round reuses the first's pages";
  for (const auto& [id, p] : which) {
    if (id == 3 || id == 8) continue;
    size_t clear = 0;
    while (clear < golden[p].steps.size() && golden[p].steps[clear].margin >= 1e-3f) ++clear;
    std::vector<int32_t> want(golden[p].output.begin(), golden[p].output.begin() + clear);
    std::vector<int32_t> got(out[id].begin(), out[id].begin() + std::min(clear, out[id].size()));
    EXPECT_EQ(got, want) << "request " << id << " (prompt " << p << ")";
  }
}

// The host tier: a conversation pushed out of a small pool by other traffic comes back by copies from host
// memory, bit-identical to computing it cold, and every page and slot is accounted for afterwards.
TEST(Engine, PagesRestoredFromTheHostTierGiveTheColdResult) {
  auto golden = load_golden("m3-tiny-msa");  // page size 8
  EngineOptions o;
  o.max_num_batched_tokens = 64;
  Engine e(load_fixture("m3-tiny-msa", 20, "", "auto", /*num_host_kv_pages=*/64), o);
  auto run = [&](const std::vector<int32_t>& prompt, int n, uint64_t salt = 0) {
    Request r = greedy(prompt, n);
    r.sampling.logprobs = 0;
    r.cache_salt = salt;
    return run_alone(e, r);
  };
  const std::vector<int32_t>& conversation = golden[5].prompt;  // 121 tokens: 15 full pages
  const std::vector<TokenEvent> cold = run(conversation, 6);
  for (uint64_t salt : {1, 3})
    run(golden[4].prompt, 4, salt);  // other traffic (9 pages each) turns the pool over
  ASSERT_GT(e.stats().host_pages_used, 0);
  const std::vector<TokenEvent> warm = run(conversation, 6);
  ASSERT_EQ(warm.size(), cold.size());
  EXPECT_EQ(warm[0].cached_tokens, 120);
  EXPECT_GT(e.stats().prefix_cache_host_hits, 0) << "some of the 120 came back from the host";
  for (size_t i = 0; i < cold.size(); ++i) {
    EXPECT_EQ(warm[i].token, cold[i].token) << i;
    EXPECT_EQ(warm[i].logprobs->logprob, cold[i].logprobs->logprob) << i;
  }
  EXPECT_EQ(e.stats().kv_pages_free, e.stats().kv_pages_total);
}

}  // namespace
}  // namespace m3::testing
