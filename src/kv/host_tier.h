// The host-memory tier of the prefix cache (vLLM's KV offloading, SGLang's HiCache, TensorRT-LLM's
// host_cache_size): a fixed set of host slots, each holding one page's K/V and index keys, found by the same
// hash chain as the GPU pool's registered pages. BlockPool spills a registered page here when it evicts it
// from the GPU, and restores it from here when a prefix lookup misses on the GPU. Slots are given up least
// recently used first (pages a client asked to keep last). Pure bookkeeping: the backend owns the host memory
// the slot ids index and runs the copies BlockPool queues.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/eviction_order.h"
#include "kv/page_key.h"

namespace m3 {

class HostTier {
 public:
  explicit HostTier(int num_slots);

  int num_slots() const { return static_cast<int>(keys_.size()); }
  int num_used() const { return static_cast<int>(index_.size()); }
  bool contains(uint64_t hash) const { return index_.count(hash) > 0; }
  // The slot holding the page hashed `hash` (checked against its parent and tokens), now the most recently
  // used; -1 if none.
  int32_t find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, double now);
  // A slot for a new page (an unused one, else the next victim, forgotten), registered under key.hash.
  int32_t store(const PageKey& key, double now);
  // Forgets every slot (POST /reset_prefix_cache); returns how many held a page.
  int reset();

 private:
  std::vector<PageKey> keys_;
  std::vector<int32_t> unused_;
  EvictionOrder order_;  // every used slot
  std::unordered_map<uint64_t, int32_t> index_;
};

}  // namespace m3
