// KV page pool: allocation covers exactly the tokens asked for, is all-or-nothing, and release returns pages.
#include <gtest/gtest.h>

#include <set>

#include "kv/block_pool.h"

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
