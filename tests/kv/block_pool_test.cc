// KV page pool: allocation covers exactly the tokens asked for, is all-or-nothing, and release returns pages;
// with prefix caching, registered pages are shared by reference along the hash chain, evicted oldest first
// only when the pool needs them, never registered twice, and reset forgets only what nobody holds.
#include <gtest/gtest.h>

#include <set>
#include <span>

#include "kv/block_pool.h"
#include "kv/pool_test_util.h"
#include "support/token_ramp.h"

namespace m3 {
namespace {

TEST(BlockPool, GrowsTablesByWholePages) {
  BlockPool pool(10, 128);
  std::vector<int32_t> t;
  EXPECT_TRUE(pool.ensure(t, 1));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(pool.ensure(t, 128));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(pool.ensure(t, 129));
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.pages_for(2048), 16);
}

TEST(BlockPool, AllOrNothingAndDistinctPages) {
  BlockPool pool(4, 16);
  std::vector<int32_t> a, b;
  EXPECT_TRUE(pool.ensure(a, 40));  // 3 pages
  EXPECT_FALSE(pool.ensure(b, 40));
  EXPECT_TRUE(b.empty()) << "a failed allocation leaves the table unchanged";
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.ensure(b, 16));
  std::set<int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 4u);
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.ensure(b, 64));
  EXPECT_EQ(pool.num_free(), 0);
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

using testing::token_ramp;

TEST(BlockPoolPrefixCache, SharesTheLongestCachedPrefixByReference) {
  BlockPool pool(10, 4, true);
  const std::vector<int32_t> a = token_ramp(10, 100);  // pages [100..103] [104..107], 2 tokens left over
  std::vector<int32_t> ta;
  compute_and_register(pool, ta, a, 0);
  EXPECT_EQ(pool.num_cached(), 2);
  // Same first 8 tokens, then different: both full pages are shared, and held by two tables now.
  std::vector<int32_t> b = token_ramp(8, 100);
  b.push_back(1), b.push_back(2), b.push_back(3);
  std::vector<int32_t> tb;
  uint64_t chain = 0;
  EXPECT_EQ(pool.acquire_prefix(tb, b, 0, 100, &chain), 2);
  EXPECT_EQ(tb, std::vector<int32_t>(ta.begin(), ta.begin() + 2));
  // max_pages caps the hit (the scheduler never takes the page of the last known token).
  std::vector<int32_t> tc;
  EXPECT_EQ(pool.acquire_prefix(tc, b, 0, 1, &chain), 1);
  // A different salt or a different first page shares nothing.
  std::vector<int32_t> td, te;
  EXPECT_EQ(pool.acquire_prefix(td, b, 99, 100, &chain), 0);
  EXPECT_EQ(chain, 99u);
  std::vector<int32_t> other = b;
  other[0] = 5;
  EXPECT_EQ(pool.acquire_prefix(te, other, 0, 100, &chain), 0);
  // Referenced pages are not free; once every holder lets go they are free again but still findable.
  EXPECT_EQ(pool.num_free(), 10 - 3);
  pool.release(ta);
  pool.release(tb);
  pool.release(tc);
  EXPECT_EQ(pool.num_free(), 10);
  EXPECT_EQ(pool.num_cached(), 2);
  std::vector<int32_t> tf;
  EXPECT_EQ(pool.acquire_prefix(tf, a, 0, 100, &chain), 2);
  EXPECT_EQ(chain, BlockPool::chain_hash(BlockPool::chain_hash(0, std::span(a).subspan(0, 4)),
                                         std::span(a).subspan(4, 4)));
}

TEST(BlockPoolPrefixCache, EvictsUnreferencedCachedPagesOnlyWhenNeededOldestFirst) {
  BlockPool pool(4, 2, true);
  const std::vector<int32_t> a = token_ramp(4, 10), b = token_ramp(4, 50);
  std::vector<int32_t> ta, tb;
  compute_and_register(pool, ta, a, 0);
  compute_and_register(pool, tb, b, 0);
  pool.release(ta);  // released first: evicted first (its last page before its first)
  pool.release(tb);
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.ensure(fresh, 2));  // one page: a's second page goes
  uint64_t chain = 0;
  std::vector<int32_t> hit;
  EXPECT_EQ(pool.acquire_prefix(hit, a, 0, 100, &chain), 1) << "a's first page survives its second";
  pool.release(hit);
  std::vector<int32_t> hb;
  EXPECT_EQ(pool.acquire_prefix(hb, b, 0, 100, &chain), 2) << "b, released later, is whole";
  // Everything referenced or in use: no page left, and the next ensure fails without touching anything.
  std::vector<int32_t> more;
  ASSERT_TRUE(pool.ensure(more, 2));
  std::vector<int32_t> none;
  EXPECT_FALSE(pool.ensure(none, 2));
  EXPECT_TRUE(none.empty());
}

TEST(BlockPoolPrefixCache, DuplicatesStayPrivateAndResetForgetsOnlyUnheldPages) {
  BlockPool pool(6, 2, true);
  const std::vector<int32_t> a = token_ramp(4, 1);
  std::vector<int32_t> t1, t2;
  compute_and_register(pool, t1, a, 0);
  compute_and_register(pool, t2, a, 0);  // the same content computed twice (both admitted before either ran)
  EXPECT_EQ(pool.num_cached(), 2) << "the second copy is not registered";
  pool.release(t2);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.reset_cache(), 0) << "the registered pages are still held by t1";
  pool.release(t1);
  EXPECT_EQ(pool.reset_cache(), 2);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 6);
  uint64_t chain = 0;
  std::vector<int32_t> t3;
  EXPECT_EQ(pool.acquire_prefix(t3, a, 0, 100, &chain), 0);
}

TEST(BlockPoolPrefixCache, OffByDefault) {
  BlockPool pool(4, 2);
  const std::vector<int32_t> a = token_ramp(4, 1);
  std::vector<int32_t> t1, t2;
  compute_and_register(pool, t1, a, 0);
  EXPECT_EQ(pool.num_cached(), 0);
  uint64_t chain = 0;
  EXPECT_EQ(pool.acquire_prefix(t2, a, 0, 100, &chain), 0);
}

}  // namespace
}  // namespace m3
