// The prefix cache's host tier and retention: the eviction order (plain pages first, kept ones last, expired
// kept ones before unexpired), host slots found only with matching tokens, and BlockPool's spills and
// restores queued in the order the backend must run them; kept pages outlive others, within their share of
// the pool.
#include <gtest/gtest.h>

#include "kv/block_pool.h"
#include "kv/eviction_order.h"
#include "kv/host_tier.h"
#include "kv/pool_test_util.h"
#include "support/token_ramp.h"

namespace m3 {
namespace {

using testing::token_ramp;

TEST(EvictionOrder, PlainPagesGoFirstThenExpiredKeptOnesThenTheOldestKept) {
  EvictionOrder order(6);
  order.push(0, true);
  order.push(1, false);
  order.push(2, true);
  order.push(3, false);
  order.remove(3);  // referenced again
  EXPECT_FALSE(order.contains(3));
  EXPECT_EQ(order.size(), 3);
  auto expired = [](int32_t id) { return id == 2; };
  EXPECT_EQ(order.pop(expired), 1);
  EXPECT_EQ(order.pop(expired), 2) << "an expired kept page goes before an unexpired one released earlier";
  EXPECT_EQ(order.pop(expired), 0);
  EXPECT_EQ(order.pop(expired), -1);
}

TEST(HostTier, FindsOnlyMatchingPagesAndRecyclesTheLeastRecentlyUsedSlot) {
  HostTier host(2);
  const std::vector<int32_t> a = token_ramp(4, 1), b = token_ramp(4, 10), c = token_ramp(4, 20);
  const int32_t sa = host.store({11, 0, a, 0}, 0);
  const int32_t sb = host.store({22, 0, b, 0}, 0);
  EXPECT_NE(sa, sb);
  EXPECT_EQ(host.find(11, 0, a, 0), sa);
  EXPECT_EQ(host.find(11, 0, b, 0), -1) << "same hash, other tokens: a collision is a miss";
  EXPECT_EQ(host.find(11, 5, a, 0), -1) << "same tokens after another parent: a miss";
  const int32_t sc = host.store({33, 0, c, 0}, 0);  // full: b, the least recently used, goes
  EXPECT_EQ(sc, sb);
  EXPECT_FALSE(host.contains(22));
  EXPECT_EQ(host.find(11, 0, a, 0), sa);
  EXPECT_EQ(host.reset(), 2);
  EXPECT_EQ(host.num_used(), 0);
  EXPECT_EQ(host.find(11, 0, a, 0), -1);
}

TEST(HostTier, KeptSlotsOutliveOthersUntilTheirTime) {
  HostTier host(2);
  const std::vector<int32_t> a = token_ramp(2, 1), b = token_ramp(2, 5), c = token_ramp(2, 9);
  host.store({1, 0, a, 100}, 0);  // kept until t = 100
  host.store({2, 0, b, 0}, 0);
  host.store({3, 0, c, 0}, 1);
  EXPECT_TRUE(host.contains(1)) << "the unkept page went first, though a is older";
  EXPECT_FALSE(host.contains(2));
  HostTier kept(2);
  kept.store({4, 0, b, 1000}, 0);  // older, kept longer
  kept.store({5, 0, a, 100}, 0);
  kept.store({6, 0, c, 0}, 200);  // t = 200: 5's time has passed, 4's has not
  EXPECT_TRUE(kept.contains(4));
  EXPECT_FALSE(kept.contains(5));
}

TEST(BlockPoolHostTier, EvictedPagesSpillAndComeBackByACopyInOrder) {
  BlockPool pool(4, 2, true, /*num_host_slots=*/8);
  const std::vector<int32_t> a = token_ramp(4, 10), b = token_ramp(8, 50);
  std::vector<int32_t> ta, tb;
  compute_and_register(pool, ta, a, 7);
  EXPECT_TRUE(pool.take_transfers().empty());
  const std::vector<int32_t> a_pages = ta;
  pool.release(ta);
  compute_and_register(pool, tb, b, 0);  // needs all 4 pages: a's two are evicted, so spilled
  std::vector<PageTransfer> spills = pool.take_transfers();
  ASSERT_EQ(spills.size(), 2u);
  for (const PageTransfer& t : spills) EXPECT_TRUE(t.to_host);
  EXPECT_EQ(pool.host_tier()->num_used(), 2);
  pool.release(tb);

  uint64_t chain = 0;
  int restored = 0;
  std::vector<int32_t> again;
  EXPECT_EQ(pool.acquire_prefix(again, a, 7, 100, &chain, &restored), 2);
  EXPECT_EQ(restored, 2);
  const std::vector<PageTransfer> moves = pool.take_transfers();
  // Each restore needs a GPU page, and the pool is full of b's released pages: each takes one (spilling it
  // first, as b's pages are not on the host yet), then copies a's slot into it.
  ASSERT_EQ(moves.size(), 4u);
  EXPECT_TRUE(moves[0].to_host);
  EXPECT_FALSE(moves[1].to_host);
  EXPECT_EQ(moves[1].page, moves[0].page) << "the spill of the page runs before the restore into it";
  // a's pages were released (so spilled) last page first.
  EXPECT_EQ(moves[1].host_slot, spills[1].host_slot) << "a's first page comes back from its slot";
  EXPECT_EQ(moves[3].host_slot, spills[0].host_slot);
  EXPECT_EQ(again, (std::vector<int32_t>{moves[1].page, moves[3].page}));
  EXPECT_EQ(chain, BlockPool::chain_hash(BlockPool::chain_hash(7, {a.data(), 2}), {a.data() + 2, 2}));
  // Restored pages are registered again: a second sequence shares them without another copy.
  std::vector<int32_t> shared;
  EXPECT_EQ(pool.acquire_prefix(shared, a, 7, 100, &chain, &restored), 2);
  EXPECT_EQ(restored, 0);
  EXPECT_EQ(shared, again);
  EXPECT_TRUE(pool.take_transfers().empty());
  // Another salt finds nothing, on the device or the host.
  std::vector<int32_t> other;
  EXPECT_EQ(pool.acquire_prefix(other, a, 8, 100, &chain, &restored), 0);
  pool.release(shared);
  pool.release(again);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPoolHostTier, ResetForgetsTheHostTierToo) {
  BlockPool pool(2, 2, true, 4);
  const std::vector<int32_t> a = token_ramp(4, 1), b = token_ramp(4, 9);
  std::vector<int32_t> ta, tb;
  compute_and_register(pool, ta, a, 0);
  pool.release(ta);
  compute_and_register(pool, tb, b, 0);
  pool.release(tb);
  EXPECT_EQ(pool.host_tier()->num_used(), 2);
  pool.reset_cache();
  EXPECT_EQ(pool.host_tier()->num_used(), 0);
  uint64_t chain = 0;
  std::vector<int32_t> t;
  EXPECT_EQ(pool.acquire_prefix(t, a, 0, 100, &chain), 0);
}

TEST(BlockPoolRetention, KeptPagesOutliveOthersWithinTheirShareAndUntilTheirTime) {
  BlockPool pool(8, 2, true, 0, /*retain_share=*/0.5);
  const std::vector<int32_t> kept = token_ramp(4, 1), plain = token_ramp(4, 20), big = token_ramp(6, 40);
  std::vector<int32_t> tk, tp;
  compute_and_register(pool, tk, kept, 0);
  EXPECT_EQ(pool.retain(tk, 10.0), 2);
  EXPECT_EQ(pool.retain(tk, 5.0), 0) << "an earlier time does not shorten the retention";
  pool.release(tk);  // released first...
  compute_and_register(pool, tp, plain, 0);
  pool.release(tp);
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.ensure(fresh, 12));  // 6 pages: the 4 unused and plain's 2
  uint64_t chain = 0;
  std::vector<int32_t> hit;
  EXPECT_EQ(pool.acquire_prefix(hit, plain, 0, 100, &chain), 0) << "...but the unkept pages went first";
  EXPECT_EQ(pool.acquire_prefix(hit, kept, 0, 100, &chain), 2);
  pool.release(hit);
  pool.release(fresh);
  // Once its time has passed, a kept page is evicted like any other (before unexpired kept ones).
  pool.set_clock(11.0);
  std::vector<int32_t> all;
  ASSERT_TRUE(pool.ensure(all, 16));
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(all);
  // The share: at most 4 of the 8 pages are kept at once.
  std::vector<int32_t> tb;
  compute_and_register(pool, tb, big, 0);
  std::vector<int32_t> tc;
  compute_and_register(pool, tc, kept, 0);
  EXPECT_EQ(pool.retain(tb, 100.0), 3);
  EXPECT_EQ(pool.retain(tc, 100.0), 1) << "the share of kept pages is full";
}

}  // namespace
}  // namespace m3
