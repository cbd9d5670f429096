// The segment cache's LRU (see segment_cache.h).
#include "tokenizer/segment_cache.h"

#include <functional>

namespace m3::tok {

uint64_t SegmentCache::key_of(std::string_view text, bool parse_special) {
  return std::hash<std::string_view>{}(text) ^ (parse_special ? 0x9e3779b97f4a7c15ull : 0);
}

bool SegmentCache::find(std::string_view text, bool parse_special, std::vector<int32_t>& out) {
  const uint64_t key = key_of(text, parse_special);
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end() || it->second->parse_special != parse_special || it->second->text != text)
    return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  out.insert(out.end(), it->second->ids.begin(), it->second->ids.end());
  ++hits_;
  return true;
}

void SegmentCache::insert(std::string_view text, bool parse_special, std::span<const int32_t> ids) {
  const size_t size = text.size() + ids.size_bytes();
  if (size > max_bytes_ / 4) return;  // one segment never takes most of the cache
  const uint64_t key = key_of(text, parse_special);
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = index_.find(key); it != index_.end()) {  // the same segment, or a colliding one
    bytes_ -= it->second->text.size() + it->second->ids.size() * sizeof(int32_t);
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front({key, std::string(text), parse_special, {ids.begin(), ids.end()}});
  index_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_ > max_bytes_) {
    const Entry& old = lru_.back();
    bytes_ -= old.text.size() + old.ids.size() * sizeof(int32_t);
    index_.erase(old.key);
    lru_.pop_back();
  }
}

size_t SegmentCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace m3::tok
