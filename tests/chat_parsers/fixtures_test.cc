// Recorded model outputs (tests/fixtures/chat_parsers/): each parses to its expected OpenAI shape, and
// streaming gives exactly the whole-text result at every byte split, at random multi-splits, byte by byte,
// and for every prefix (every place the output could have been cut off).
#include <random>

#include "parser_test_util.h"

namespace m3::test {
namespace {

struct Case {
  std::string name;
  ThinkingStart start;
  std::string text;
  nlohmann::json expect;
};

const nlohmann::json& tools() {
  static const nlohmann::json t = read_json(std::string(kFixtureDir) + "tools.json");
  return t;
}

std::vector<Case> load_cases() {
  std::vector<Case> out;
  for (const auto& c : read_json(std::string(kFixtureDir) + "cases.json")) {
    out.push_back({c["name"], start_from_name(c["thinking"]),
                   read_file(kFixtureDir + c["output"].get<std::string>()), c["expect"]});
  }
  return out;
}

TEST(chat_parsers_Fixtures, AllCasesLoad) {
  auto cases = load_cases();
  EXPECT_GE(cases.size(), 40u);
  for (const auto& c : cases) EXPECT_FALSE(c.text.empty()) << c.name;
}

TEST(chat_parsers_Fixtures, WholeTextMatchesExpected) {
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c.name);
    ChainResult r = run_whole(c.text, c.start, tools());
    const auto& want = c.expect;
    if (want["reasoning"].is_null()) {
      EXPECT_FALSE(r.reasoning.has_value()) << *r.reasoning;
    } else {
      ASSERT_TRUE(r.reasoning.has_value());
      EXPECT_EQ(*r.reasoning, want["reasoning"].get<std::string>());
    }
    EXPECT_EQ(r.content, want["content"].get<std::string>());
    ASSERT_EQ(r.tool_calls.size(), want["tool_calls"].size()) << r;
    for (size_t i = 0; i < r.tool_calls.size(); ++i) {
      EXPECT_EQ(r.tool_calls[i].id, "call_" + std::to_string(i));
      EXPECT_EQ(r.tool_calls[i].name, want["tool_calls"][i]["name"].get<std::string>());
      auto args = nlohmann::json::parse(r.tool_calls[i].arguments_json, nullptr, false);
      ASSERT_FALSE(args.is_discarded()) << "not JSON: " << r.tool_calls[i].arguments_json;
      EXPECT_EQ(args, want["tool_calls"][i]["arguments"]) << r.tool_calls[i].arguments_json;
    }
  }
}

TEST(chat_parsers_Fixtures, StreamingEqualsWholeAtEverySplitPoint) {
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c.name);
    ChainResult whole = run_whole(c.text, c.start, tools());
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      ChainResult s = run_stream(split_at(c.text, {cut}), c.start, tools());
      ASSERT_EQ(s, whole) << "split at byte " << cut;
    }
  }
}

TEST(chat_parsers_Fixtures, StreamingEqualsWholeAtRandomMultiSplits) {
  std::mt19937 rng(20260301);
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c.name);
    ChainResult whole = run_whole(c.text, c.start, tools());
    for (int trial = 0; trial < 300; ++trial) {
      auto cuts = random_cuts(c.text.size(), rng);
      ChainResult s = run_stream(split_at(c.text, cuts), c.start, tools());
      ASSERT_EQ(s, whole) << "trial " << trial;
    }
  }
}

TEST(chat_parsers_Fixtures, EveryPrefixStreamsByteByByteLikeWhole) {
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c.name);
    for (size_t len = 0; len <= c.text.size(); ++len) {
      std::string_view prefix = std::string_view(c.text).substr(0, len);
      ChainResult whole = run_whole(prefix, c.start, tools());
      ChainResult s = run_stream(bytes_of(prefix), c.start, tools());
      ASSERT_EQ(s, whole) << "prefix of " << len << " bytes";
      if (!valid_utf8(prefix)) continue;  // a value cut inside a character is not valid UTF-8, so not JSON
      for (const auto& call : whole.tool_calls) {
        auto args = nlohmann::json::parse(call.arguments_json, nullptr, false);
        ASSERT_TRUE(args.is_object()) << "prefix " << len << ": " << call.arguments_json;
      }
    }
  }
}

// Cut-off outputs never lose what was already certain: the calls of a prefix are a prefix of the calls of the
// whole text (same ids and names), so what a client saw streamed is never contradicted.
TEST(chat_parsers_Fixtures, PrefixesNeverContradictTheWhole) {
  for (const auto& c : load_cases()) {
    SCOPED_TRACE(c.name);
    ChainResult whole = run_whole(c.text, c.start, tools());
    for (size_t len = 0; len <= c.text.size(); ++len) {
      ChainResult p = run_whole(std::string_view(c.text).substr(0, len), c.start, tools());
      ASSERT_LE(p.tool_calls.size(), whole.tool_calls.size()) << len;
      for (size_t i = 0; i < p.tool_calls.size(); ++i) {
        EXPECT_EQ(p.tool_calls[i].name, whole.tool_calls[i].name) << len;
      }
    }
  }
}

}  // namespace
}  // namespace m3::test
