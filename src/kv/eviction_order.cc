// Two LRU lists (see eviction_order.h).
#include "kv/eviction_order.h"

#include <iterator>

#include "common/error.h"

namespace m3 {

EvictionOrder::EvictionOrder(int num_ids) : pos_(size_t(num_ids)), where_(size_t(num_ids), kNone) {}

void EvictionOrder::push(int32_t id, bool kept) {
  M3_CHECK(where_[size_t(id)] == kNone, "a page is in the eviction order twice");
  std::list<int32_t>& l = kept ? kept_ : plain_;
  l.push_back(id);
  pos_[size_t(id)] = std::prev(l.end());
  where_[size_t(id)] = kept ? kKept : kPlain;
}

void EvictionOrder::remove(int32_t id) {
  const uint8_t w = where_[size_t(id)];
  if (w == kNone) return;
  (w == kKept ? kept_ : plain_).erase(pos_[size_t(id)]);
  where_[size_t(id)] = kNone;
}

int32_t EvictionOrder::pop(const std::function<bool(int32_t)>& expired) {
  int32_t id = -1;
  if (!plain_.empty()) {
    id = plain_.front();
  } else if (!kept_.empty()) {
    id = kept_.front();
    for (int32_t k : kept_)
      if (expired(k)) {
        id = k;
        break;
      }
  }
  if (id >= 0) remove(id);
  return id;
}

std::vector<int32_t> EvictionOrder::drain() {
  std::vector<int32_t> ids(plain_.begin(), plain_.end());
  ids.insert(ids.end(), kept_.begin(), kept_.end());
  for (int32_t id : ids) where_[size_t(id)] = kNone;
  plain_.clear();
  kept_.clear();
  return ids;
}

}  // namespace m3
