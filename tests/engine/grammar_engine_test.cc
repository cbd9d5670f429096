// Structured output through the engine on a real (tiny, random-weight) model: every finished answer is a
// sentence of its grammar and every cut one a prefix of one, whichever device samples (host, or a backend
// that samples itself with the masks the engine computes while the forward pass runs), with the same tokens
// for the same seed; reasoning runs unconstrained until its end marker.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/error.h"

#include "engine/engine.h"
#include "grammar/ebnf.h"
#include "grammar/token_mask.h"
#include "support/device_sampling_backend.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

constexpr int32_t kStop = 511, kThinkStart = 509, kThinkEnd = 510;

// The fixture's 512 ids as text: bytes 0..255, then pieces over the grammar's alphabet; 509 / 510 the
// reasoning markers (special), 511 the stop id.
std::shared_ptr<const grammar::Vocabulary> vocab() {
  std::vector<std::string> bytes;
  std::vector<char> special(512, 0);
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  std::mt19937 rng(5);
  const std::string alphabet = "[]{},abcxyz";
  while (bytes.size() < 509) {
    std::string s;
    for (int j = 0, n = 2 + static_cast<int>(rng() % 4); j < n; ++j) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  bytes.push_back("<think>");
  bytes.push_back("</think>");
  bytes.push_back("");
  special[kThinkStart] = special[kThinkEnd] = special[kStop] = 1;
  return std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::move(special),
                                                     std::vector<int32_t>{kStop});
}

std::shared_ptr<const grammar::TokenGrammar> nested_lists() {
  static const auto g =
      grammar::TokenGrammar::compile(grammar::parse_ebnf("root ::= \"[\" item (\",\" item)* \"]\"\n"
                                                         "item ::= [a-z]{1,4} | \"{\" root \"}\"\n"),
                                     vocab(), {}, 1);
  return g;
}

Request constrained(uint64_t seed, GrammarConstraint g) {
  Request r;
  r.prompt = {1, 2, 3, 4, 5};
  r.max_tokens = 40;
  r.seed = seed;
  r.sampling.temperature = 1.0f;
  r.grammar = std::move(g);
  return r;
}

struct Answer {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

std::map<int64_t, Answer> run(Engine& e) {
  std::map<int64_t, Answer> out;
  while (e.has_work())
    for (const TokenEvent& ev : e.step()) {
      out[ev.request_id].tokens.push_back(ev.token);
      out[ev.request_id].finish = ev.finish;
    }
  return out;
}

// The text of an answer's constrained part (after the reasoning end marker when there is one).
std::string constrained_text(const Answer& a, bool after_think_end) {
  const auto v = vocab();
  std::string text;
  bool on = !after_think_end;
  for (int32_t t : a.tokens) {
    if (t == kThinkEnd) {
      on = true;
      continue;
    }
    if (on && t != kStop) text += v->bytes(t);
  }
  return text;
}

void expect_follows(const Answer& a, const std::string& text) {
  grammar::Matcher m = nested_lists()->matcher();
  ASSERT_TRUE(m.accept(text)) << "not a prefix of the grammar: " << text;
  if (a.finish == FinishReason::kStop) {
    EXPECT_EQ(a.tokens.back(), kStop);
    EXPECT_TRUE(m.can_finish()) << text;
  } else {
    EXPECT_EQ(a.finish, FinishReason::kLength);
  }
}

TEST(GrammarEngine, AnswersFollowTheGrammarOnHostAndDeviceAlike) {
  std::map<int64_t, Answer> results[2];
  for (int device = 0; device < 2; ++device) {
    std::unique_ptr<ModelBackend> backend = load_fixture("m3-tiny-msa");
    if (device) backend = std::make_unique<DeviceSamplingBackend>(std::move(backend));
    Engine e(std::move(backend), {});
    for (uint64_t seed = 0; seed < 10; ++seed) e.add(constrained(seed, {nested_lists()}));
    results[device] = run(e);
    EXPECT_EQ(e.stats().grammar_masks, e.stats().generated_tokens);
  }
  int finished = 0;
  for (const auto& [id, a] : results[0]) {
    expect_follows(a, constrained_text(a, false));
    finished += a.finish == FinishReason::kStop;
    EXPECT_EQ(a.tokens, results[1].at(id).tokens)
        << "request " << id << ": the sampling device changed the answer";
  }
  EXPECT_GT(finished, 0) << "no answer completed its structure within 40 tokens";
}

TEST(GrammarEngine, ReasoningRunsFreeUntilItsEndMarker) {
  Engine e(load_fixture("m3-tiny-msa"), {});
  GrammarConstraint g{nested_lists(), /*starts_in_reasoning=*/true, kThinkStart, kThinkEnd};
  Request r = constrained(3, g);
  r.max_tokens = 60;
  r.thinking_budget = ThinkingBudget{5, kThinkStart, kThinkEnd, true};  // force the end after 5 tokens
  e.add(r);
  const Answer a = run(e).begin()->second;
  ASSERT_GT(a.tokens.size(), 6u);
  EXPECT_EQ(a.tokens[5], kThinkEnd);
  bool any_outside = false;  // the reasoning tokens were not held to the grammar
  for (int i = 0; i < 5; ++i) {
    grammar::Matcher m = nested_lists()->matcher();
    any_outside = any_outside || !m.accept(vocab()->bytes(a.tokens[i]));
  }
  EXPECT_TRUE(any_outside);
  expect_follows(a, constrained_text(a, true));
}

TEST(GrammarEngine, AnAdaptiveAnswerMaySkipItsReasoningOnlyFirst) {
  // The end marker is pushed hard: allowed (and taken) as the first token only, then the grammar holds.
  Engine e(load_fixture("m3-tiny-msa"), {});
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Request r = constrained(seed, {nested_lists(), false, kThinkStart, kThinkEnd});
    r.sampling.logit_bias[kThinkEnd] = 100;
    e.add(r);
  }
  for (const auto& [id, a] : run(e)) {
    ASSERT_GE(a.tokens.size(), 2u);
    EXPECT_EQ(a.tokens[0], kThinkEnd);
    EXPECT_EQ(std::count(a.tokens.begin(), a.tokens.end(), kThinkEnd), 1);
    expect_follows(a, constrained_text(a, true));
  }
}

TEST(GrammarEngine, RejectsAGrammarOverALargerVocabulary) {
  Engine e(load_fixture("m3-tiny-msa"), {});
  std::vector<std::string> bytes(600, "x");
  auto big =
      std::make_shared<const grammar::Vocabulary>(bytes, std::vector<char>(600, 0), std::vector<int32_t>{});
  Request r = constrained(0, {grammar::TokenGrammar::compile(grammar::parse_ebnf("root ::= \"x\""), big)});
  EXPECT_THROW(e.add(r), Error);
}

}  // namespace
}  // namespace m3::testing
