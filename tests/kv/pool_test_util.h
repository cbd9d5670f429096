// A sequence's life in a BlockPool without a scheduler: pages for its tokens, its full pages registered.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "kv/block_pool.h"

namespace m3 {

inline void compute_and_register(BlockPool& pool, std::vector<int32_t>& table,
                                 const std::vector<int32_t>& tokens, uint64_t salt) {
  ASSERT_TRUE(pool.ensure(table, int64_t(tokens.size())));
  uint64_t chain = salt;
  const int P = pool.page_size();
  for (size_t b = 0; (b + 1) * P <= tokens.size(); ++b)
    chain = pool.register_page(table[b], chain, std::span<const int32_t>(tokens).subspan(b * P, size_t(P)));
}

}  // namespace m3
