// Free-list allocation of KV pages.
#include "kv/block_pool.h"

#include "common/error.h"

namespace m3 {

BlockPool::BlockPool(int num_pages, int page_size) : num_pages_(num_pages), page_size_(page_size) {
  if (num_pages <= 0 || page_size <= 0)
    fail(ErrorKind::kInvalidArgument, "KV pool needs pages and a page size");
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

bool BlockPool::ensure(std::vector<int32_t>& table, int64_t num_tokens) {
  const int need = pages_for(num_tokens) - static_cast<int>(table.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace m3
