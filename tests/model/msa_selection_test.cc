// MSA block selection, spec §6.2 (block 8 / top-k 4 style configs).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "model/msa_selection.h"

namespace m3 {
namespace {

MsaConfig cfg(int topk, int local = 1, int init = 0) {
  MsaConfig m;
  m.block_size = 8;
  m.topk_blocks = topk;
  m.local_blocks = local;
  m.init_blocks = init;
  return m;
}

TEST(MsaSelection, AllVisibleBlocksWhenFewerThanTopK) {
  std::vector<float> scores = {-5, 3, -1};
  std::vector<int32_t> sel;
  for (int L = 0; L < 3; ++L) {
    select_blocks(scores.data(), L, cfg(4), &sel);
    std::vector<int32_t> want(L + 1);
    for (int b = 0; b <= L; ++b) want[b] = b;
    EXPECT_EQ(sel, want);
  }
  select_blocks(scores.data(), 3, cfg(4), &sel);  // n == top-k: still everything
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(MsaSelection, LocalBlockForcedAndExactlyTopKDistinct) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n;
  for (int trial = 0; trial < 200; ++trial) {
    const int L = 4 + static_cast<int>(rng() % 60);
    std::vector<float> scores(L + 1);
    for (float& s : scores) s = n(rng);
    scores[L] = -1e30f;  // the local block wins by force, not by score
    std::vector<int32_t> sel;
    select_blocks(scores.data(), L, cfg(4), &sel);
    ASSERT_EQ(sel.size(), 4u);
    EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
    EXPECT_EQ(std::adjacent_find(sel.begin(), sel.end()), sel.end()) << "duplicates";
    EXPECT_EQ(sel.back(), L);
    // The other three are the three best non-local blocks.
    std::vector<int32_t> rest(L);
    for (int b = 0; b < L; ++b) rest[b] = b;
    std::sort(rest.begin(), rest.end(), [&](int a, int b) { return scores[a] > scores[b]; });
    std::vector<int32_t> want(rest.begin(), rest.begin() + 3);
    want.push_back(L);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(sel, want);
  }
}

TEST(MsaSelection, NoFutureBlockEverSelected) {
  // Scores past the query's block are huge; selection must not look at them.
  std::vector<float> scores(40, 1e30f);
  for (int b = 0; b <= 20; ++b) scores[b] = static_cast<float>(b % 7);
  std::vector<int32_t> sel;
  select_blocks(scores.data(), 20, cfg(4), &sel);
  for (int32_t b : sel) EXPECT_LE(b, 20);
}

TEST(MsaSelection, TiesGoToTheLowerBlockId) {
  std::vector<float> scores(10, 2.0f);
  std::vector<int32_t> sel;
  select_blocks(scores.data(), 9, cfg(4), &sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 9}));
}

TEST(MsaSelection, NanScoresRankLast) {
  std::vector<float> scores = {std::numeric_limits<float>::quiet_NaN(), 1, 2, std::nanf(""), 0, 5, 9};
  std::vector<int32_t> sel;
  select_blocks(scores.data(), 6, cfg(4), &sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 2, 5, 6}));
}

TEST(MsaSelection, GeneralFormInitAndSeveralLocalBlocks) {
  std::vector<float> scores = {-9, 5, 4, 3, 2, 1, 0, -1, -2, -3};
  std::vector<int32_t> sel;
  select_blocks(scores.data(), 9, cfg(5, /*local=*/2, /*init=*/1), &sel);
  // forced: block 0 (init), blocks 8 and 9 (local); two best of the rest: 1 and 2.
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 8, 9}));
}

}  // namespace
}  // namespace m3
