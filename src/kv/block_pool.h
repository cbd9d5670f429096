// KV page bookkeeping: a fixed pool of page ids (page = page_size tokens = one MSA block; a page id indexes
// the K, V and index-K arrays of every layer at once), handed out to sequences' block tables and returned
// when they finish or are preempted. Pure CPU state; the backend owns the memory the ids point into.
#pragma once

#include <cstdint>
#include <vector>

namespace m3 {

class BlockPool {
 public:
  BlockPool(int num_pages, int page_size);

  int page_size() const { return page_size_; }
  int num_pages() const { return num_pages_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int pages_for(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + page_size_ - 1) / page_size_);
  }

  // Grows `table` to cover `num_tokens` positions. All-or-nothing: returns false (table unchanged) when the
  // pool cannot supply the pages.
  bool ensure(std::vector<int32_t>& table, int64_t num_tokens);
  // Returns every page of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

 private:
  int num_pages_, page_size_;
  std::vector<int32_t> free_;  // stack: the most recently freed page is reused first (warm in cache)
};

}  // namespace m3
