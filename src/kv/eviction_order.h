// The order in which unreferenced cached pages (GPU pool) or host slots (host tier) are given up: least
// recently released first, and a page a client asked to keep (Anthropic cache_control, its keep_until not yet
// passed when it was released) only once no other is left: first those whose time has run out since, then the
// least recently released.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <vector>

namespace m3 {

class EvictionOrder {
 public:
  explicit EvictionOrder(int num_ids);

  int size() const { return static_cast<int>(plain_.size() + kept_.size()); }
  bool contains(int32_t id) const { return where_[size_t(id)] != kNone; }
  // Makes `id` the most recently released (it must not be in the order yet).
  void push(int32_t id, bool kept);
  // Takes `id` out of the order (it is referenced again); no-op if it is not in it.
  void remove(int32_t id);
  // Takes out and returns the next victim; `expired(id)` says whether a kept one's time has run out. -1 when
  // the order is empty.
  int32_t pop(const std::function<bool(int32_t)>& expired);
  // Takes out every id, least recent first.
  std::vector<int32_t> drain();

 private:
  enum : uint8_t { kNone, kPlain, kKept };
  std::list<int32_t> plain_, kept_;  // front = least recently released
  std::vector<std::list<int32_t>::iterator> pos_;
  std::vector<uint8_t> where_;
};

}  // namespace m3
