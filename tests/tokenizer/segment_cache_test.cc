// The segment cache: a resent conversation (long segments between special tokens) takes its old segments
// from the cache, and whatever comes from it is exactly what tokenizing afresh gives, for changed segments
// of the same length too, with special tokens parsed or not.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/segment_cache.h"
#include "tokenizer/tokenizer.h"

namespace m3 {
namespace {

std::string words(size_t n, uint32_t seed) {
  static const char* kWords[] = {"alpha", "beta", " gamma", "delta(x)", "{", "}\n",
                                 "42",    "  ",   "é",      "naïve",    "😀"};
  std::mt19937 rng(seed);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += std::string(kWords[rng() % std::size(kWords)]) + " ";
  return s;
}

TEST(TokenizerSegmentCache, ResentSegmentsComeFromTheCacheAndEqualAFreshTokenization) {
  const Tokenizer cached = Tokenizer::load(test::kM3TokenizerPath);
  const std::string sys = words(800, 1), user = words(600, 2), answer = words(700, 3);
  const std::string turn1 = "]~b]system\n" + sys + "[e~[\n]~b]user\n" + user + "[e~[\n";
  const std::string turn2 = turn1 + "]~b]ai\n" + answer + "[e~[\n]~b]user\n" + words(300, 4) + "[e~[\n";
  const std::vector<int32_t> first = cached.encode(turn1);
  EXPECT_EQ(cached.segment_cache_hits(), 0u);
  const std::vector<int32_t> second = cached.encode(turn2);
  EXPECT_GE(cached.segment_cache_hits(), 2u) << "the system prompt and the first user turn";
  const Tokenizer fresh = Tokenizer::load(test::kM3TokenizerPath);
  EXPECT_EQ(second, fresh.encode(turn2));
  EXPECT_TRUE(std::equal(first.begin(), first.end(), second.begin()));
  // A segment changed in place (same length) is not mistaken for the cached one.
  std::string edited = turn2;
  edited[turn2.find("alpha", 2000)] = 'A';
  const Tokenizer fresh2 = Tokenizer::load(test::kM3TokenizerPath);
  EXPECT_EQ(cached.encode(edited), fresh2.encode(edited));
  // Without special-token parsing the markers are text: another key, another result.
  EXPECT_EQ(cached.encode(turn2, false), fresh.encode(turn2, false));
  EXPECT_NE(cached.encode(turn2, false), second);
}

TEST(TokenizerSegmentCache, EvictsTheLeastRecentlyUsedWithinItsBytes) {
  tok::SegmentCache cache(40000);
  const std::vector<int32_t> ids(1000, 7);
  const std::string a(4000, 'a'), b(4000, 'b'), c(4000, 'c');
  cache.insert(a, true, ids);  // 8,000 bytes each (text + ids)
  cache.insert(b, true, ids);
  std::vector<int32_t> out;
  EXPECT_TRUE(cache.find(a, true, out));  // a is now the most recent
  EXPECT_FALSE(cache.find(a, false, out)) << "parse_special is part of the key";
  for (int i = 0; i < 3; ++i) cache.insert(std::string(4000, char('d' + i)), true, ids);
  cache.insert(c, true, ids);  // 48,000 > 40,000: b, the least recent, goes
  EXPECT_FALSE(cache.find(b, true, out));
  EXPECT_TRUE(cache.find(a, true, out));
  EXPECT_EQ(out.size(), 2000u);
  cache.insert(std::string(20000, 'x'), true, ids);  // over a quarter of the cache: not kept
  EXPECT_FALSE(cache.find(std::string(20000, 'x'), true, out));
}

}  // namespace
}  // namespace m3
