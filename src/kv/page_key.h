// What identifies the content of a cached KV page, in the GPU pool and in the host tier alike: its hash-chain
// hash, its parent's hash and its tokens (compared on every hit, so a hash collision can never hand out the
// wrong KV), and how long a client asked for it to be kept (Anthropic cache_control; 0: no request).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace m3 {

struct PageKey {
  uint64_t hash = 0, parent = 0;
  std::vector<int32_t> tokens;
  double keep_until = 0;  // on the pool's clock (seconds); 0: evicted by LRU alone

  bool matches(uint64_t parent_hash, std::span<const int32_t> page_tokens) const {
    return parent == parent_hash && tokens.size() == page_tokens.size() &&
           std::equal(tokens.begin(), tokens.end(), page_tokens.begin());
  }
};

// A page copy between the GPU pool and the host tier, in the order the backend must run them (before the
// step's forward pass writes any page).
struct PageTransfer {
  int32_t page = 0;       // the pool's page id
  int32_t host_slot = 0;  // the host tier's slot id
  bool to_host = false;   // true: spill page -> slot; false: restore slot -> page
};

}  // namespace m3
