// Recorded outputs split where the model's tokens split them: encode with the real MiniMax-M3 tokenizer
// (markers become single special tokens), decode growing prefixes of the ids, and stream the pieces. Built
// only when the tokenizer module is part of the build.
#include <random>

#include "parser_test_util.h"
#include "tokenizer/tokenizer.h"

namespace m3::test {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  return t;
}

// Byte offsets at which decoding a prefix of the ids gives a prefix of the text (a boundary inside a UTF-8
// character decodes to U+FFFD and is skipped, as a streaming detokenizer would hold those bytes back).
std::vector<size_t> token_cuts(const std::string& text, const std::vector<int32_t>& ids) {
  std::vector<size_t> cuts;
  for (size_t n = 1; n < ids.size(); ++n) {
    std::string prefix = tokenizer().decode(std::span<const int32_t>(ids.data(), n));
    if (prefix.size() < text.size() && text.compare(0, prefix.size(), prefix) == 0 &&
        (cuts.empty() || prefix.size() > cuts.back()) && !prefix.empty()) {
      cuts.push_back(prefix.size());
    }
  }
  return cuts;
}

TEST(chat_parsers_TokenBoundaries, MarkersAreSingleTokens) {
  for (const char* marker : {"]<]minimax[>[", "<tool_call>", "</tool_call>", "<mm:think>", "</mm:think>"}) {
    EXPECT_EQ(tokenizer().encode(marker).size(), 1u) << marker;
  }
}

TEST(chat_parsers_TokenBoundaries, RecordedOutputsStreamedTokenByToken) {
  const nlohmann::json tools = read_json(std::string(kFixtureDir) + "tools.json");
  std::mt19937 rng(31337);
  int cases = 0;
  for (const auto& c : read_json(std::string(kFixtureDir) + "cases.json")) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string text = read_file(kFixtureDir + c["output"].get<std::string>());
    std::vector<int32_t> ids = tokenizer().encode(text);
    ASSERT_EQ(tokenizer().decode(ids), text);
    ThinkingStart start = start_from_name(c["thinking"]);
    ChainResult whole = run_whole(text, start, tools);
    std::vector<size_t> cuts = token_cuts(text, ids);
    EXPECT_GE(cuts.size() + 1, ids.size() / 2);
    ASSERT_EQ(run_stream(split_at(text, cuts), start, tools), whole) << "one token per chunk";
    for (int trial = 0; trial < 50;
         ++trial) {  // several tokens per chunk, as a server with batched decode sees
      std::vector<size_t> some;
      for (size_t cut : cuts) {
        if (rng() % 3 == 0) some.push_back(cut);
      }
      ASSERT_EQ(run_stream(split_at(text, some), start, tools), whole) << "trial " << trial;
    }
    ++cases;
  }
  EXPECT_GE(cases, 40);
}

}  // namespace
}  // namespace m3::test
