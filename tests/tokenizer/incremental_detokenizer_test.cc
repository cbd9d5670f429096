// IncrementalDetokenizer tests: streamed output equals decode() for every golden text and for random id
// sequences (specials, unknown ids, raw byte tokens), every chunk is valid UTF-8, and characters split
// across tokens are held back until complete.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/incremental_detokenizer.h"

namespace m3 {
namespace {

using test::m3_tokenizer;
using test::printable;
using test::valid_utf8;

// Streams `ids` and checks each chunk; returns the concatenation.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip, bool* all_valid) {
  IncrementalDetokenizer detok(tok, skip);
  std::string out;
  *all_valid = true;
  for (int32_t id : ids) {
    std::string chunk = detok.push(id);
    *all_valid &= valid_utf8(chunk);
    out += chunk;
  }
  std::string tail = detok.flush();
  *all_valid &= valid_utf8(tail);
  return out + tail;
}

TEST(IncrementalDetokenizer, GoldenTextsStreamLikeDecode) {
  const Tokenizer& tok = m3_tokenizer();
  const auto goldens = test::read_json(test::kM3GoldensPath);
  for (const auto& e : goldens["texts"]) {
    const auto ids = e["ids"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      bool valid = false;
      EXPECT_EQ(stream(tok, ids, skip, &valid), tok.decode(ids, skip))
          << printable(e["text"].get<std::string>());
      EXPECT_TRUE(valid);
    }
  }
}

TEST(IncrementalDetokenizer, HoldsSplitCharacters) {
  const Tokenizer& tok = m3_tokenizer();
  IncrementalDetokenizer detok(tok, false);
  // 😀 = F0 9F 98 80, pushed as four single-byte tokens (ids equal byte values).
  EXPECT_EQ(detok.push(0xF0), "");
  EXPECT_EQ(detok.push(0x9F), "");
  EXPECT_TRUE(detok.has_pending());
  EXPECT_EQ(detok.push(0x98), "");
  EXPECT_EQ(detok.push(0x80), "😀");
  EXPECT_FALSE(detok.has_pending());
  EXPECT_EQ(detok.push('A'), "A");
  EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizer, RealTokensSplittingEmojiAndCjk) {
  const Tokenizer& tok = m3_tokenizer();
  // Texts whose token boundaries fall inside characters (rare scripts, ZWJ emoji, skin tones).
  for (const std::string text : {"👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽", "𠀀𠀁𠀂 𪚥 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
                                 "ꙮ ᚠᛇᚻ ⴰⵣⵓⵍ", "日本語のテキスト"}) {
    const auto ids = tok.encode(text);
    bool split_inside = false;
    for (int32_t id : ids) split_inside |= !valid_utf8(std::string(tok.token_bytes(id)));
    bool valid = false;
    EXPECT_EQ(stream(tok, ids, false, &valid), text);
    EXPECT_TRUE(valid);
    if (text.rfind("👨", 0) == 0) {
      EXPECT_TRUE(split_inside) << "expected a token boundary inside a character";
    }
  }
}

TEST(IncrementalDetokenizer, FlushEmitsHeldBytesAsReplacement) {
  const Tokenizer& tok = m3_tokenizer();
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.push('x'), "x");
  EXPECT_EQ(detok.push(0xE4), "");
  EXPECT_EQ(detok.push(0xB8), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
  // Reusable after flush.
  EXPECT_EQ(detok.push('y'), "y");
}

TEST(IncrementalDetokenizer, InvalidSequenceEmitsReplacementImmediately) {
  const Tokenizer& tok = m3_tokenizer();
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.push(0xE0), "");
  EXPECT_EQ(detok.push('A'),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(detok.push(0xFF), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, SkipSpecialJoinsBytesAcrossSkippedIds) {
  const Tokenizer& tok = m3_tokenizer();
  const std::vector<int32_t> ids = {0xE4, 0xB8, 200020, 0x96, 200059, 'o', 'k'};
  for (bool skip : {false, true}) {
    bool valid = false;
    EXPECT_EQ(stream(tok, ids, skip, &valid), tok.decode(ids, skip));
    EXPECT_TRUE(valid);
  }
}

TEST(IncrementalDetokenizer, RandomIdSequencesMatchDecode) {
  const Tokenizer& tok = m3_tokenizer();
  std::mt19937 rng(1234);
  const auto vocab = static_cast<int32_t>(tok.vocab_size());
  for (int n = 0; n < 2000; ++n) {
    std::vector<int32_t> ids;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) {
      switch (rng() % 4) {
        case 0:
          ids.push_back(static_cast<int32_t>(0x80 + rng() % 0x80));
          break;  // raw high bytes
        case 1:
          ids.push_back(static_cast<int32_t>(200000 + rng() % 64));
          break;  // specials and unknowns
        case 2:
          ids.push_back(static_cast<int32_t>(rng() % (vocab + 8)) - 4);
          break;
        default:
          ids.push_back(static_cast<int32_t>(rng() % 256));
          break;
      }
    }
    for (bool skip : {false, true}) {
      bool valid = false;
      ASSERT_EQ(stream(tok, ids, skip, &valid), tok.decode(ids, skip)) << "sequence " << n;
      ASSERT_TRUE(valid) << "sequence " << n;
    }
  }
}

}  // namespace
}  // namespace m3
