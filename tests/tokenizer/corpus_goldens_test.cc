// Checks every entry of tests/fixtures/tokenizer/corpus_goldens.json (written by
// tools/goldens/make_text_goldens.py with HF tokenizers): encode, decode with and without special tokens,
// encode with special-token parsing off when recorded, streaming, and the recorded random id sequences.
// Skipped when the file is absent.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"
#include "tokenizer/incremental_detokenizer.h"

namespace m3 {
namespace {

using test::printable;

TEST(CorpusGoldens, EveryEntryMatchesHf) {
  if (!std::filesystem::exists(test::kCorpusGoldensPath)) {
    GTEST_SKIP() << test::kCorpusGoldensPath << " not generated yet (tools/goldens/make_text_goldens.py)";
  }
  const Tokenizer& tok = test::m3_tokenizer();
  const auto goldens = test::read_json(test::kCorpusGoldensPath);
  const auto& entries = goldens.at("entries");
  ASSERT_FALSE(entries.empty());
  size_t failures = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string text = e.at("text").get<std::string>();
    const auto ids = e.at("ids").get<std::vector<int32_t>>();
    const std::string where =
        "entries[" + std::to_string(i) + "] (" + e.value("kind", "?") + ") " + printable(text);
    const auto got = tok.encode(text);
    bool ok = got == ids;
    EXPECT_EQ(got, ids) << where;
    ok &= tok.decode(ids) == e.at("decoded").get<std::string>();
    EXPECT_EQ(tok.decode(ids), e.at("decoded").get<std::string>()) << where;
    ok &= tok.decode(ids, true) == e.at("decoded_skip_special").get<std::string>();
    EXPECT_EQ(tok.decode(ids, true), e.at("decoded_skip_special").get<std::string>()) << where;
    if (e.contains("ids_split_special")) {
      const auto plain = e["ids_split_special"].get<std::vector<int32_t>>();
      ok &= tok.encode(text, false) == plain;
      EXPECT_EQ(tok.encode(text, false), plain) << where;
    }
    IncrementalDetokenizer detok(tok, false);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.push(id);
    streamed += detok.flush();
    ok &= streamed == e.at("decoded").get<std::string>();
    EXPECT_EQ(streamed, e.at("decoded").get<std::string>()) << where;
    if (!ok && ++failures >= 20) FAIL() << "stopping after 20 failing entries";
  }
}

TEST(CorpusGoldens, RandomIdSequencesDecodeLikeHf) {
  if (!std::filesystem::exists(test::kCorpusGoldensPath)) {
    GTEST_SKIP() << test::kCorpusGoldensPath << " not generated yet (tools/goldens/make_text_goldens.py)";
  }
  const Tokenizer& tok = test::m3_tokenizer();
  const auto goldens = test::read_json(test::kCorpusGoldensPath);
  if (!goldens.contains("decode_entries")) GTEST_SKIP() << "no decode_entries recorded";
  for (size_t i = 0; i < goldens["decode_entries"].size(); ++i) {
    const auto& e = goldens["decode_entries"][i];
    const auto ids = e.at("ids").get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      const std::string want = e.at(skip ? "decoded_skip_special" : "decoded").get<std::string>();
      EXPECT_EQ(tok.decode(ids, skip), want) << "decode_entries[" << i << "] skip=" << skip;
      IncrementalDetokenizer detok(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += detok.push(id);
      streamed += detok.flush();
      EXPECT_EQ(streamed, want) << "decode_entries[" << i << "] streamed, skip=" << skip;
    }
  }
}

}  // namespace
}  // namespace m3
