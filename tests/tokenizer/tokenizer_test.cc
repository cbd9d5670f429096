// Tokenizer tests: the HF goldens of the MiniMax-M3 tokenizer, added/special tokens, decode edge cases
// (lossy UTF-8, unknown ids, skip_special_tokens), load errors, long inputs, concurrency, and the behaviour
// of added-token flags on a tiny hand-written tokenizer.json.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "common/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace m3 {
namespace {

using test::m3_tokenizer;
using test::printable;

std::vector<int32_t> json_ids(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

TEST(TokenizerGoldens, EveryTextMatchesHf) {
  const Tokenizer& tok = m3_tokenizer();
  const auto goldens = test::read_json(test::kM3GoldensPath);
  ASSERT_GE(goldens.at("texts").size(), 20u);
  for (size_t i = 0; i < goldens["texts"].size(); ++i) {
    const auto& e = goldens["texts"][i];
    const std::string text = e.at("text").get<std::string>();
    const std::vector<int32_t> ids = json_ids(e.at("ids"));
    EXPECT_EQ(tok.encode(text), ids) << "texts[" << i << "] " << printable(text);
    EXPECT_EQ(tok.decode(ids), e.at("decoded").get<std::string>())
        << "texts[" << i << "] " << printable(text);
  }
}

TEST(TokenizerGoldens, RenderedConversationsMatchHf) {
  const Tokenizer& tok = m3_tokenizer();
  const auto goldens = test::read_json(test::kM3GoldensPath);
  ASSERT_FALSE(goldens.at("conversations").empty());
  for (size_t i = 0; i < goldens["conversations"].size(); ++i) {
    const auto& c = goldens["conversations"][i];
    const std::string rendered = c.at("rendered").get<std::string>();
    const auto ids = json_ids(c.at("ids"));
    EXPECT_EQ(tok.encode(rendered), ids) << "conversations[" << i << "]";
    EXPECT_EQ(tok.decode(ids), rendered) << "conversations[" << i << "]";
  }
}

TEST(TokenizerGoldens, SpecExamples) {
  const Tokenizer& tok = m3_tokenizer();
  // serving-api.md §1.6 (MiniMax-M2.7 prompt, same base vocabulary; <think> is id 200050 in M3 as well).
  const std::string prompt =
      "]~!b[]~b]system\nYou are a helpful assistant. Your name is MiniMax-M2.7 and is built by "
      "MiniMax.[e~[\n]~b]user\ntest[e~[\n]~b]ai\n<think>\n";
  const std::vector<int32_t> prompt_ids = {
      200034, 200019, 28463,  10,   2985, 457,  258,    12473, 23413,  46,   5324,  1925,   355,
      35353,  12973,  5145,   50,   46,   55,   306,    355,   6904,   531,  35353, 12973,  46,
      200020, 10,     200019, 3995, 10,   4500, 200020, 10,    200019, 1361, 10,    200050, 10};
  EXPECT_EQ(tok.encode(prompt), prompt_ids);
  EXPECT_EQ(tok.decode(prompt_ids), prompt);
  const std::string plain =
      "The user says \"test\". This is a simple test message. The assistant should respond appropriately. "
      "There's no policy violation.";
  const std::vector<int32_t> plain_ids = {758,  3100,  3700, 494,   4500, 4969, 1204,  355,
                                          258,  4160,  1618, 4838,  46,   517,  23413, 1352,
                                          7623, 36238, 46,   25209, 687,  5177, 23077, 46};
  EXPECT_EQ(tok.encode(plain), plain_ids);
}

TEST(TokenizerGoldens, SplitExampleFromSpec) {
  const Tokenizer& tok = m3_tokenizer();
  // "Hello's 1234!!!\n世界" splits to ["Hello's", " ", "123", "4", "!!!\n", "世界"]; each piece encodes alone
  // to the same ids it gets in context.
  std::vector<int32_t> joined;
  for (const char* piece : {"Hello's", " ", "123", "4", "!!!\n", "世界"}) {
    auto ids = tok.encode(piece);
    joined.insert(joined.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(tok.encode("Hello's 1234!!!\n世界"), joined);
}

TEST(TokenizerVocab, ByteTokensAndSizes) {
  const Tokenizer& tok = m3_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 200061u);
  EXPECT_EQ(tok.id_to_token(32), "Ġ");
  EXPECT_EQ(tok.id_to_token(10), "Ċ");
  EXPECT_EQ(tok.id_to_token(0), "Ā");
  EXPECT_EQ(tok.token_to_id("Ġ"), 32);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(tok.token_bytes(b), std::string(1, static_cast<char>(b))) << b;
  }
  EXPECT_EQ(tok.id_to_token(-1), "");
  EXPECT_EQ(tok.id_to_token(200061), "");
  EXPECT_EQ(tok.id_to_token(200063), "");
  EXPECT_EQ(tok.token_to_id("definitely not a token"), std::nullopt);
  EXPECT_FALSE(tok.is_known(200062));
  EXPECT_TRUE(tok.is_known(199999));
  EXPECT_FALSE(tok.is_special(199999));
}

TEST(TokenizerAddedTokens, EveryIdRoundTrips) {
  const Tokenizer& tok = m3_tokenizer();
  auto added = tok.added_token_ids();
  ASSERT_EQ(added.size(), 61u);
  for (int32_t id = 200000; id <= 200060; ++id) {
    const std::string content = tok.id_to_token(id);
    ASSERT_FALSE(content.empty()) << id;
    EXPECT_EQ(tok.token_to_id(content), id) << content;
    EXPECT_TRUE(tok.is_special(id)) << content;
    EXPECT_EQ(tok.encode(content), std::vector<int32_t>{id}) << content;
    EXPECT_EQ(tok.decode(std::vector<int32_t>{id}), content);
    EXPECT_EQ(tok.decode(std::vector<int32_t>{id}, /*skip_special_tokens=*/true), "");
    // Without special parsing the same text is ordinary BPE and round-trips through decode.
    auto plain = tok.encode(content, /*parse_special=*/false);
    for (int32_t p : plain) EXPECT_LT(p, 200000) << content;
    EXPECT_EQ(tok.decode(plain), content);
  }
  EXPECT_EQ(tok.token_to_id("<mm:think>"), 200059);
  EXPECT_EQ(tok.token_to_id("</mm:think>"), 200060);
  EXPECT_EQ(tok.token_to_id("]<]minimax[>["), 200058);
  EXPECT_EQ(tok.token_to_id("[e~["), 200020);
}

TEST(TokenizerAddedTokens, ParseSpecialInText) {
  const Tokenizer& tok = m3_tokenizer();
  const std::string text = "]~b]user\nhi[e~[";
  const auto ids = tok.encode(text);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 200019);
  EXPECT_EQ(ids.back(), 200020);
  EXPECT_EQ(ids, (std::vector<int32_t>{200019, 3995, 10, 8685, 200020}));
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "user\nhi");

  const auto plain = tok.encode(text, /*parse_special=*/false);
  for (int32_t id : plain) EXPECT_LT(id, 200000);
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(tok.decode(plain, /*skip_special_tokens=*/true), text);
  // `<mm:think>` as plain BPE (serving-api.md §1.4).
  EXPECT_EQ(tok.encode("<mm:think>", false), (std::vector<int32_t>{60, 4759, 58, 37959, 62}));
}

TEST(TokenizerAddedTokens, AdjacentAndPartialMarkers) {
  const Tokenizer& tok = m3_tokenizer();
  EXPECT_EQ(tok.encode("[e~[[e~[]~b]"), (std::vector<int32_t>{200020, 200020, 200019}));
  // An incomplete marker is ordinary text.
  for (int32_t id : tok.encode("]~b user [e~ <mm:think")) EXPECT_LT(id, 200000);
  EXPECT_EQ(tok.decode(tok.encode("x<tool_call>y</tool_call>z")), "x<tool_call>y</tool_call>z");
}

TEST(TokenizerDecode, SkipSpecialTokensKeepsSurroundingBytes) {
  const Tokenizer& tok = m3_tokenizer();
  // The skipped id sits between the bytes of one UTF-8 character: HF concatenates the remaining bytes first,
  // so the character survives when specials are skipped and breaks when they are kept.
  const std::vector<int32_t> ids = {0xE4, 0xB8, 200020, 0x96};  // 世 = E4 B8 96
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "世");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/false), "\xEF\xBF\xBD[e~[\xEF\xBF\xBD");
}

TEST(TokenizerDecode, LossyUtf8LikeRust) {
  const Tokenizer& tok = m3_tokenizer();
  auto d = [&](std::vector<int32_t> ids) { return tok.decode(ids); };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(d({0xF0, 0x9F, 0x98, 0x80}), "😀");
  EXPECT_EQ(d({0xF0, 0x9F, 0x98}), r);                    // truncated sequence: one replacement
  EXPECT_EQ(d({0xF0, 0x9F, 0x41}), r + "A");              // broken by ASCII: one replacement, ASCII kept
  EXPECT_EQ(d({0xE0, 0x80}), r + r);                      // E0 80 is overlong: both bytes invalid
  EXPECT_EQ(d({0xED, 0xA0, 0x80}), r + r + r);            // surrogate
  EXPECT_EQ(d({0xFF, 0xC0, 0x41}), r + r + "A");          // never-valid bytes
  EXPECT_EQ(d({0xF4, 0x90, 0x80, 0x80}), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(d({0xC3}), r);
  EXPECT_EQ(d({0xC3, 0xA9}), "é");
}

TEST(TokenizerDecode, UnknownIdsAreSkipped) {
  const Tokenizer& tok = m3_tokenizer();
  EXPECT_EQ(tok.decode(std::vector<int32_t>{72, -5, 200061, 200063, 1000000, 105}), "Hi");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}), "");
}

TEST(TokenizerEncode, InvalidUtf8IsRejected) {
  const Tokenizer& tok = m3_tokenizer();
  try {
    tok.encode("ok\xC3(");
    FAIL() << "expected m3::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), Error);  // encoded surrogate
}

TEST(TokenizerEncode, NormalizesToNfc) {
  const Tokenizer& tok = m3_tokenizer();
  EXPECT_EQ(tok.encode("caf"
                       "e\xCC\x81"),
            tok.encode("caf\xC3\xA9"));
  EXPECT_EQ(tok.decode(tok.encode("e\xCC\x81")), "\xC3\xA9");
  // Hangul jamo compose too.
  EXPECT_EQ(tok.decode(tok.encode("\xE1\x84\x80\xE1\x85\xA1")), "가");
}

TEST(TokenizerEncode, NormalizationUsesUnicode9Repertoire) {
  const Tokenizer& tok = m3_tokenizer();
  // U+0369 (ccc 230) then U+1DFA (ccc 218, new in Unicode 14): current NFC swaps them, HF's Unicode 9.0
  // tables do not know U+1DFA and keep the order (found by the HF differential corpus).
  const std::string text = "x\xCD\xA9\xE1\xB7\xBA";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // Marks known to Unicode 9.0 are still reordered: U+0301 (230) after U+0323 (220) stays, reversed swaps.
  EXPECT_EQ(tok.decode(tok.encode("q\xCC\x81\xCC\xA3")), "q\xCC\xA3\xCC\x81");
}

TEST(TokenizerEncode, LongInputsRoundTrip) {
  const Tokenizer& tok = m3_tokenizer();
  std::vector<std::string> inputs = {
      std::string(200000, 'a'),  std::string(200000, ' '), std::string(100000, ' ') + "x",
      std::string(100000, '\n'), std::string(100000, 'Z'), std::string(100000, '7'),
      std::string(100000, '!'),
  };
  std::string cjk;
  for (int i = 0; i < 30000; ++i) cjk += "漢字";
  inputs.push_back(cjk);
  std::string mixed;
  for (int i = 0; i < 20000; ++i) mixed += "Hello,  world\t\r\n 123 ÄÖÜ 😀 ";
  inputs.push_back(mixed);
  for (const auto& s : inputs) {
    const auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << printable(s, 40);
  }
}

TEST(TokenizerEncode, ConcurrentEncodesAgree) {
  const Tokenizer& tok = m3_tokenizer();
  const auto goldens = test::read_json(test::kM3GoldensPath);
  std::vector<std::string> texts;
  for (const auto& e : goldens["texts"]) texts.push_back(e["text"].get<std::string>());
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Tokenizer copy = tok;  // handles share state
      for (int round = 0; round < 50; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t k = (i + t * 7 + round) % texts.size();
          if (copy.encode(texts[k]) != expected[k]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerEncode, RandomTextRoundTrips) {
  const Tokenizer& tok = m3_tokenizer();
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {
      "a", "Z", " ",        "  ",           "\t",   "\n",        "\r\n",         "'", "'s", "1", "42",
      "é", "ß", "Σ",        "日",           "🙂", "👍🏽",  "\xE2\x80\x8D", "،", "क्",  "ไ", ".",
      "!", "/", "\xC2\xA0", "\xE3\x80\x80", "[e~[", "<mm:think>"};
  for (int n = 0; n < 300; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    for (bool parse_special : {true, false}) {
      EXPECT_EQ(tok.decode(tok.encode(s, parse_special)), s) << printable(s);
    }
  }
}

TEST(TokenizerLoad, DirectoryHoldingTokenizerJson) {
  const Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3");
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{19739, 2035}));
  EXPECT_NE(tok.path().find("tokenizer.json"), std::string::npos);
}

void expect_load_error(const std::string& path, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    Tokenizer::load(path);
    FAIL() << "loading " << path << " should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, Errors) {
  expect_load_error("tests/fixtures/tokenizer/does_not_exist.json", ErrorKind::kNotFound,
                    {"does_not_exist.json"});
  expect_load_error("tests/fixtures/tokenizer", ErrorKind::kNotFound, {"tests/fixtures/tokenizer"});
  expect_load_error("tests/fixtures/tokenizer/malformed.json", ErrorKind::kCorruptData,
                    {"malformed.json", "invalid JSON"});
  expect_load_error("tests/fixtures/tokenizer/unsupported_model.json", ErrorKind::kUnsupported,
                    {"unsupported_model.json", "model.type", "WordPiece"});
  expect_load_error("tests/fixtures/tokenizer/unsupported_normalizer.json", ErrorKind::kUnsupported,
                    {"unsupported_normalizer.json", "normalizer", "Precompiled"});
  expect_load_error("tests/fixtures/tokenizer/bad_merge.json", ErrorKind::kCorruptData,
                    {"bad_merge.json", "model.merges", "'ab'"});
}

// Added-token flags and BPE edge cases on a hand-written tokenizer (expected values follow HF's
// AddedVocabulary and BPE rules; see added_tokens.h).
class TinyTokenizer : public ::testing::Test {
 protected:
  static const Tokenizer& tok() {
    static const Tokenizer t = Tokenizer::load("tests/fixtures/tokenizer/tiny_added.json");
    return t;
  }
  using Ids = std::vector<int32_t>;
};

TEST_F(TinyTokenizer, MergesByRank) {
  EXPECT_EQ(tok().encode("abc"), Ids({5}));
  EXPECT_EQ(tok().encode("bc"), Ids({8}));
  EXPECT_EQ(tok().encode("ba"), Ids({1, 0}));
  EXPECT_EQ(tok().encode("a  b"), Ids({0, 7, 1}));
  EXPECT_EQ(tok().vocab_size(), 27u);
}

TEST_F(TinyTokenizer, UnknownCharactersBecomeUnk) {
  EXPECT_EQ(tok().encode("abz"), Ids({4, 6}));
  EXPECT_EQ(tok().encode("zz"), Ids({6, 6}));  // fuse_unk is false
}

TEST_F(TinyTokenizer, SpecialToken) {
  EXPECT_EQ(tok().encode("a <s> b"), Ids({0, 3, 20, 3, 1}));
  EXPECT_EQ(tok().encode("<s>", /*parse_special=*/false), Ids({6, 6, 6}));
  EXPECT_EQ(tok().decode(Ids({0, 3, 20, 3, 1})), "a <s> b");
  EXPECT_EQ(tok().decode(Ids({0, 3, 20, 3, 1}), /*skip_special_tokens=*/true), "a  b");
  EXPECT_TRUE(tok().is_special(20));
  EXPECT_FALSE(tok().is_special(21));
}

TEST_F(TinyTokenizer, LstripAndRstrip) {
  EXPECT_EQ(tok().encode("a  [L]b"), Ids({0, 21, 1}));
  EXPECT_EQ(tok().encode("a[R]  b"), Ids({0, 22, 1}));
  EXPECT_EQ(tok().encode("[L][R] [L]"), Ids({21, 22, 21}));
}

TEST_F(TinyTokenizer, SingleWord) {
  EXPECT_EQ(tok().encode("a cc b"), Ids({0, 3, 23, 3, 1}));
  EXPECT_EQ(tok().encode("cc"), Ids({23}));
  EXPECT_EQ(tok().encode("acc"), Ids({0, 2, 2}));
  EXPECT_EQ(tok().encode("cc_"), Ids({2, 2, 6}));
}

TEST_F(TinyTokenizer, LeftmostLongestThenFilter) {
  EXPECT_EQ(tok().encode("<long>"), Ids({24}));
  EXPECT_EQ(tok().encode("<lo"), Ids({25}));
  // The special match still consumes its span when specials are not parsed, so "<lo" is not found inside.
  EXPECT_EQ(tok().encode("<long>", /*parse_special=*/false), Ids({6, 6, 6, 6, 6, 6}));
}

TEST_F(TinyTokenizer, NormalizedAddedTokenMatchesAfterNfc) {
  EXPECT_EQ(tok().encode("a\xC3\xA9t\xC3\xA9"), Ids({0, 26}));
  EXPECT_EQ(tok().encode("ae\xCC\x81te\xCC\x81"), Ids({0, 26}));
  EXPECT_EQ(tok().encode("\xC3\xA9t"), Ids({9, 10}));
}

}  // namespace
}  // namespace m3
