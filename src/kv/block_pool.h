// KV page bookkeeping: a fixed pool of page ids (page = page_size tokens = one MSA block; a page id indexes
// the K, V and index-K arrays of every layer at once), handed out to sequences' block tables and returned
// when they finish or are preempted. Pure CPU state; the backend owns the memory the ids point into.
//
// Prefix caching (vLLM's automatic prefix caching, at page granularity): a full page whose K/V (and MSA index
// keys) a sequence has computed is registered under a hash chain, hash(parent page's hash, the page's
// tokens), the first page's parent being the request's cache salt. Pages are reference-counted: a sequence
// whose token prefix matches registered pages shares them instead of recomputing them. A page nobody
// references keeps its content and stays findable until the pool needs it: such pages are evicted least
// recently released first (a sequence's pages are released last page first, so its shared head outlives its
// tail). A hit is checked against the page's stored parent hash and tokens, so a hash collision can never
// hand out the wrong KV.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace m3 {

class BlockPool {
 public:
  BlockPool(int num_pages, int page_size, bool prefix_caching = false);

  int page_size() const { return page_size_; }
  int num_pages() const { return num_pages_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Pages a sequence can get now: unused ones plus cached ones nobody references (evicted on demand).
  int num_free() const { return static_cast<int>(free_.size() + evictable_.size()); }
  // Pages holding registered content (referenced or not).
  int num_cached() const { return static_cast<int>(index_.size()); }
  int pages_for(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + page_size_ - 1) / page_size_);
  }

  // Grows `table` to cover `num_tokens` positions with fresh pages (evicting unreferenced cached pages when
  // no unused one is left). All-or-nothing: returns false (table unchanged) when the pool cannot supply them.
  bool ensure(std::vector<int32_t>& table, int64_t num_tokens);
  // Drops the table's references (last page first) and clears it.
  void release(std::vector<int32_t>& table);

  // The hash-chain step: the hash of a full page of `tokens` after a page (or salt) hashed `parent`.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);

  // With `table` empty: appends the registered pages that hold the longest prefix of `tokens` (whole pages,
  // at most max_pages), taking a reference to each; returns how many. `*chain` ends as the hash of the last
  // page taken (salt if none), from which the sequence registers its later pages. 0 without prefix caching.
  int acquire_prefix(std::vector<int32_t>& table, std::span<const int32_t> tokens, uint64_t salt,
                     int max_pages, uint64_t* chain);
  // Registers page `page`, now holding the K/V of the full page `tokens` after a page hashed `parent`, and
  // returns its hash. If other pages already hold that content, this one stays unregistered (it is freed as
  // usual); the chain goes on with the same hash either way.
  uint64_t register_page(int32_t page, uint64_t parent, std::span<const int32_t> tokens);
  // Forgets every registered page nobody references (POST /reset_prefix_cache); referenced ones stay
  // registered. Returns how many were dropped.
  int reset_cache();

 private:
  struct Entry {
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;  // the page's tokens, checked on every hit
    bool registered = false;
  };
  int32_t take_page();  // an unused page, else the least recently released cached one (unregistered first)
  void unregister(int32_t page);

  int num_pages_, page_size_;
  bool prefix_caching_;
  std::vector<int32_t> free_;     // unused, unregistered; stack: most recently freed reused first
  std::list<int32_t> evictable_;  // registered, unreferenced; front = least recently released
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<int32_t> refs_;
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, int32_t> index_;  // hash -> registered page
};

}  // namespace m3
