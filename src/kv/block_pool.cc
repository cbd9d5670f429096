// Page allocation, reference counts and the prefix-cache index (see block_pool.h).
#include "kv/block_pool.h"

#include <algorithm>
#include <iterator>

#include "common/error.h"

namespace m3 {

BlockPool::BlockPool(int num_pages, int page_size, bool prefix_caching)
    : num_pages_(num_pages), page_size_(page_size), prefix_caching_(prefix_caching) {
  if (num_pages <= 0 || page_size <= 0)
    fail(ErrorKind::kInvalidArgument, "KV pool needs pages and a page size");
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
  lru_pos_.resize(size_t(num_pages));
  refs_.assign(size_t(num_pages), 0);
  entries_.resize(size_t(num_pages));
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {  // splitmix64 over (state, token)
    h += 0x9e3779b97f4a7c15ull + static_cast<uint32_t>(t);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

void BlockPool::unregister(int32_t page) {
  Entry& e = entries_[size_t(page)];
  if (!e.registered) return;
  auto it = index_.find(e.hash);
  if (it != index_.end() && it->second == page) index_.erase(it);
  e.registered = false;
  e.tokens.clear();
}

int32_t BlockPool::take_page() {
  if (!free_.empty()) {
    const int32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  const int32_t p = evictable_.front();
  evictable_.pop_front();
  unregister(p);
  return p;
}

bool BlockPool::ensure(std::vector<int32_t>& table, int64_t num_tokens) {
  const int need = pages_for(num_tokens) - static_cast<int>(table.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int i = 0; i < need; ++i) {
    const int32_t p = take_page();
    refs_[size_t(p)] = 1;
    table.push_back(p);
  }
  return true;
}

void BlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t p = *it;
    M3_CHECK(refs_[size_t(p)] > 0, "releasing a KV page nobody holds");
    if (--refs_[size_t(p)] > 0) continue;
    if (entries_[size_t(p)].registered) {
      evictable_.push_back(p);
      lru_pos_[size_t(p)] = std::prev(evictable_.end());
    } else {
      free_.push_back(p);
    }
  }
  table.clear();
}

int BlockPool::acquire_prefix(std::vector<int32_t>& table, std::span<const int32_t> tokens, uint64_t salt,
                              int max_pages, uint64_t* chain) {
  *chain = salt;
  if (!prefix_caching_ || !table.empty()) return 0;
  int n = 0;
  for (; n < max_pages && size_t(n + 1) * size_t(page_size_) <= tokens.size(); ++n) {
    const std::span<const int32_t> page_tokens = tokens.subspan(size_t(n) * page_size_, size_t(page_size_));
    const uint64_t h = chain_hash(*chain, page_tokens);
    const auto it = index_.find(h);
    if (it == index_.end()) break;
    const int32_t p = it->second;
    const Entry& e = entries_[size_t(p)];
    if (e.parent != *chain || !std::equal(e.tokens.begin(), e.tokens.end(), page_tokens.begin())) break;
    if (refs_[size_t(p)]++ == 0) evictable_.erase(lru_pos_[size_t(p)]);
    table.push_back(p);
    *chain = h;
  }
  return n;
}

uint64_t BlockPool::register_page(int32_t page, uint64_t parent, std::span<const int32_t> tokens) {
  const uint64_t h = chain_hash(parent, tokens);
  Entry& e = entries_[size_t(page)];
  if (!prefix_caching_ || e.registered || index_.count(h)) return h;
  e.hash = h;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.registered = true;
  index_.emplace(h, page);
  return h;
}

int BlockPool::reset_cache() {
  const int n = static_cast<int>(evictable_.size());
  for (int32_t p : evictable_) {
    unregister(p);
    free_.push_back(p);
  }
  evictable_.clear();
  return n;
}

}  // namespace m3
