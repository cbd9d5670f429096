// Host slot bookkeeping (see host_tier.h).
#include "kv/host_tier.h"

namespace m3 {

HostTier::HostTier(int num_slots) : keys_(size_t(num_slots)), order_(num_slots) {
  for (int32_t s = num_slots - 1; s >= 0; --s) unused_.push_back(s);
}

int32_t HostTier::find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, double now) {
  const auto it = index_.find(hash);
  if (it == index_.end() || !keys_[size_t(it->second)].matches(parent, tokens)) return -1;
  const int32_t s = it->second;
  order_.remove(s);
  order_.push(s, keys_[size_t(s)].keep_until > now);
  return s;
}

int32_t HostTier::store(const PageKey& key, double now) {
  int32_t s = -1;
  if (!unused_.empty()) {
    s = unused_.back();
    unused_.pop_back();
  } else {
    s = order_.pop([&](int32_t k) { return keys_[size_t(k)].keep_until <= now; });
    if (s < 0) return -1;  // no slots at all
    index_.erase(keys_[size_t(s)].hash);
  }
  keys_[size_t(s)] = key;
  index_[key.hash] = s;
  order_.push(s, key.keep_until > now);
  return s;
}

int HostTier::reset() {
  const int n = num_used();
  for (int32_t s : order_.drain()) {
    keys_[size_t(s)] = PageKey{};
    unused_.push_back(s);
  }
  index_.clear();
  return n;
}

}  // namespace m3
