// Page allocation, reference counts, the prefix-cache index and the spills to / restores from the host tier
// (see block_pool.h).
#include "kv/block_pool.h"

#include "common/error.h"

namespace m3 {

BlockPool::BlockPool(int num_pages, int page_size, bool prefix_caching, int num_host_slots,
                     double retain_share)
    : num_pages_(num_pages),
      page_size_(page_size),
      prefix_caching_(prefix_caching),
      max_kept_(static_cast<int>(num_pages * retain_share)),
      order_(std::max(num_pages, 0)) {
  if (num_pages <= 0 || page_size <= 0)
    fail(ErrorKind::kInvalidArgument, "KV pool needs pages and a page size");
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);
  refs_.assign(size_t(num_pages), 0);
  entries_.resize(size_t(num_pages));
  if (prefix_caching && num_host_slots > 0) host_ = std::make_unique<HostTier>(num_host_slots);
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
  auto it = index_.find(e.key.hash);
  if (it != index_.end() && it->second == page) index_.erase(it);
  if (e.key.keep_until > 0) --num_kept_;
  e = Entry{};
}

int32_t BlockPool::take_page() {
  if (!free_.empty()) {
    const int32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  const int32_t p = order_.pop([&](int32_t k) { return !kept(k); });
  const PageKey& key = entries_[size_t(p)].key;
  if (host_ && !host_->contains(key.hash)) {  // spill before the page is reused
    const int32_t slot = host_->store(key, now_);
    if (slot >= 0) transfers_.push_back({p, slot, true});
  }
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
    if (entries_[size_t(p)].registered)
      order_.push(p, kept(p));
    else
      free_.push_back(p);
  }
  table.clear();
}

int BlockPool::acquire_prefix(std::vector<int32_t>& table, std::span<const int32_t> tokens, uint64_t salt,
                              int max_pages, uint64_t* chain, int* restored) {
  *chain = salt;
  if (restored) *restored = 0;
  if (!prefix_caching_ || !table.empty()) return 0;
  int n = 0;
  for (; n < max_pages && size_t(n + 1) * size_t(page_size_) <= tokens.size(); ++n) {
    const std::span<const int32_t> page_tokens = tokens.subspan(size_t(n) * page_size_, size_t(page_size_));
    const uint64_t h = chain_hash(*chain, page_tokens);
    const auto it = index_.find(h);
    int32_t p = -1;
    if (it != index_.end() && entries_[size_t(it->second)].key.matches(*chain, page_tokens)) {
      p = it->second;
      if (refs_[size_t(p)]++ == 0) order_.remove(p);
    } else if (host_ && num_free() > 0) {  // on the host? restore it into a fresh page
      const int32_t slot = host_->find(h, *chain, page_tokens, now_);
      if (slot < 0) break;
      p = take_page();
      refs_[size_t(p)] = 1;
      transfers_.push_back({p, slot, false});
      register_page(p, *chain, page_tokens);
      if (restored) ++*restored;
    } else {
      break;
    }
    table.push_back(p);
    *chain = h;
  }
  return n;
}

uint64_t BlockPool::register_page(int32_t page, uint64_t parent, std::span<const int32_t> tokens) {
  const uint64_t h = chain_hash(parent, tokens);
  Entry& e = entries_[size_t(page)];
  if (!prefix_caching_ || e.registered || index_.count(h)) return h;
  e.key = PageKey{h, parent, {tokens.begin(), tokens.end()}, 0};
  e.registered = true;
  index_.emplace(h, page);
  return h;
}

int BlockPool::retain(std::span<const int32_t> pages, double until) {
  int added = 0;
  for (int32_t p : pages) {
    PageKey& key = entries_[size_t(p)].key;
    if (!entries_[size_t(p)].registered || key.keep_until >= until) continue;
    if (key.keep_until <= 0) {
      if (num_kept_ >= max_kept_) {  // full: forget the expired ones, then look again
        num_kept_ = 0;
        for (Entry& e : entries_) {
          if (e.key.keep_until > 0 && e.key.keep_until <= now_) e.key.keep_until = 0;
          num_kept_ += e.key.keep_until > 0;
        }
        if (num_kept_ >= max_kept_) break;
      }
      ++num_kept_;
      ++added;
    }
    key.keep_until = until;
  }
  return added;
}

int BlockPool::reset_cache() {
  const std::vector<int32_t> dropped = order_.drain();
  for (int32_t p : dropped) {
    unregister(p);
    free_.push_back(p);
  }
  if (host_) host_->reset();
  return static_cast<int>(dropped.size());
}

}  // namespace m3
