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
// tail), pages a client asked to keep (retain(), Anthropic cache_control) only after all others. A hit is
// checked against the page's stored parent hash and tokens, so a hash collision can never hand out the wrong
// KV.
//
// With a host tier (kv/host_tier.h) an evicted registered page is first spilled to a host slot, and a prefix
// lookup that misses on the GPU restores the page from the host into a fresh GPU page. Both are queued as
// PageTransfers (take_transfers) that the backend runs, in order, before the next forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/eviction_order.h"
#include "kv/host_tier.h"
#include "kv/page_key.h"

namespace m3 {

class BlockPool {
 public:
  // num_host_slots: the host tier's size in pages (0: none). A share of the pool (retain_share) may be kept
  // for clients that asked.
  BlockPool(int num_pages, int page_size, bool prefix_caching = false, int num_host_slots = 0,
            double retain_share = 0.5);

  int page_size() const { return page_size_; }
  int num_pages() const { return num_pages_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Pages a sequence can get now: unused ones plus cached ones nobody references (evicted on demand).
  int num_free() const { return static_cast<int>(free_.size()) + order_.size(); }
  // Pages holding registered content (referenced or not).
  int num_cached() const { return static_cast<int>(index_.size()); }
  const HostTier* host_tier() const { return host_.get(); }
  int pages_for(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + page_size_ - 1) / page_size_);
  }
  // The clock keep_until times are read against (seconds; the scheduler sets it each step).
  void set_clock(double now) { now_ = now; }
  double clock() const { return now_; }

  // Grows `table` to cover `num_tokens` positions with fresh pages (evicting unreferenced cached pages when
  // no unused one is left). All-or-nothing: returns false (table unchanged) when the pool cannot supply them.
  bool ensure(std::vector<int32_t>& table, int64_t num_tokens);
  // Drops the table's references (last page first) and clears it.
  void release(std::vector<int32_t>& table);

  // The hash-chain step: the hash of a full page of `tokens` after a page (or salt) hashed `parent`.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);

  // With `table` empty: appends the pages that hold the longest cached prefix of `tokens` (whole pages, at
  // most max_pages), taking a reference to each; returns how many. Pages found only in the host tier are
  // restored into fresh GPU pages (*restored counts them). `*chain` ends as the hash of the last page taken
  // (salt if none), from which the sequence registers its later pages. 0 without prefix caching.
  int acquire_prefix(std::vector<int32_t>& table, std::span<const int32_t> tokens, uint64_t salt,
                     int max_pages, uint64_t* chain, int* restored = nullptr);
  // Registers page `page`, now holding the K/V of the full page `tokens` after a page hashed `parent`, and
  // returns its hash. If other pages already hold that content, this one stays unregistered (it is freed as
  // usual); the chain goes on with the same hash either way.
  uint64_t register_page(int32_t page, uint64_t parent, std::span<const int32_t> tokens);
  // Asks that the registered ones of `pages` be kept until `until` (clock seconds), within the pool's share
  // for kept pages; returns how many are now kept that were not before.
  int retain(std::span<const int32_t> pages, double until);
  // Forgets every registered page nobody references and the host tier (POST /reset_prefix_cache); referenced
  // ones stay registered. Returns how many GPU pages were dropped.
  int reset_cache();
  // The copies queued since the last call (spills and restores), in the order they must run.
  std::vector<PageTransfer> take_transfers() { return std::move(transfers_); }

 private:
  struct Entry {
    PageKey key;
    bool registered = false;
  };
  int32_t take_page();  // an unused page, else the next evictable cached one (spilled, then forgotten)
  void unregister(int32_t page);
  bool kept(int32_t page) const { return entries_[size_t(page)].key.keep_until > now_; }

  int num_pages_, page_size_;
  bool prefix_caching_;
  double now_ = 0;
  int max_kept_, num_kept_ = 0;  // pages with a keep_until set (possibly expired until recounted)
  std::vector<int32_t> free_;    // unused, unregistered; stack: most recently freed reused first
  EvictionOrder order_;          // registered, unreferenced
  std::vector<int32_t> refs_;
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, int32_t> index_;  // hash -> registered page
  std::unique_ptr<HostTier> host_;
  std::vector<PageTransfer> transfers_;
};

}  // namespace m3
