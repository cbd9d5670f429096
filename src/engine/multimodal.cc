// Multimodal prompts on the engine's side: encoder cache, placeholder matching, cache keys, embed rows.
#include "engine/multimodal.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace m3 {

uint64_t multimodal_hash(const media::VisionPatches& p) {
  // 64-bit words through a multiply-xorshift chain (8 bytes a step: 10 MB of patches in ~2 ms).
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(uint32_t(p.t)) << 42) ^ (uint64_t(uint32_t(p.h)) << 21) ^
               uint64_t(uint32_t(p.w));
  auto mix = [&](uint64_t v) {
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  };
  const size_t n = p.values.size();
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    uint64_t v;
    std::memcpy(&v, &p.values[i], 8);
    mix(v);
  }
  if (i < n) {
    uint32_t v;
    std::memcpy(&v, &p.values[i], 4);
    mix(v);
  }
  mix(n);
  return h;
}

EncoderCache::Features EncoderCache::get(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

EncoderCache::Features EncoderCache::features_of(const MultimodalInput& item, const ModelBackend& backend) {
  if (item.features) return item.features;
  if (Features f = get(item.hash)) return f;
  Features f = std::make_shared<const std::vector<float>>(backend.encode_vision(item.patches));
  put(item.hash, f);
  return f;
}

void EncoderCache::put(uint64_t hash, Features features) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(hash)) return;
  const size_t bytes = features->size() * sizeof(float);
  if (bytes > capacity_) return;
  lru_.emplace_front(hash, std::move(features));
  index_[hash] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > capacity_) {
    bytes_ -= lru_.back().second->size() * sizeof(float);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

MultimodalPrompt::MultimodalPrompt(const std::vector<int32_t>& prompt,
                                   const std::vector<MultimodalInput>& items, const ModelBackend& backend,
                                   EncoderCache& cache) {
  if (items.empty()) return;
  const ModelConfig& c = backend.config();
  if (!c.has_vision || !backend.has_vision())
    fail(ErrorKind::kInvalidArgument,
         "this model does not take image or video input (it has no vision tower)");
  hidden_ = c.hidden_size;
  const int merge = c.vision.spatial_merge_size * c.vision.spatial_merge_size;
  for (size_t i = 0; i < items.size(); ++i) {
    EncoderCache::Features f = cache.features_of(items[i], backend);
    if (f->size() != size_t(items[i].patches.num_patches() / merge) * hidden_)
      fail(ErrorKind::kInternal, "vision features of an unexpected size");
    features_.push_back(std::move(f));
    hashes_.push_back(items[i].hash);
  }
  size_t item = 0, row = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    if (prompt[pos] != c.vision.image_token_id && prompt[pos] != c.vision.video_token_id) continue;
    while (item < features_.size() && row == features_[item]->size() / hidden_) ++item, row = 0;
    if (item == features_.size())
      fail(ErrorKind::kInvalidArgument,
           "the prompt has more image / video placeholder tokens than its images and videos fill");
    rows_.push_back({int32_t(pos), int32_t(item), int32_t(row++), prompt[pos]});
  }
  while (item < features_.size() && row == features_[item]->size() / hidden_) ++item, row = 0;
  if (item != features_.size())
    fail(ErrorKind::kInvalidArgument, "the prompt has " + std::to_string(rows_.size()) +
                                          " image / video placeholder tokens, fewer than its " +
                                          std::to_string(items.size()) + " item(s) need");
}

std::vector<int32_t> MultimodalPrompt::cache_key(const std::vector<int32_t>& prompt) const {
  std::vector<int32_t> key = prompt;
  for (const Row& r : rows_) {
    uint64_t h = hashes_[r.item] ^ (uint64_t(r.row) * 0x9E3779B97F4A7C15ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    key[r.pos] = -1 - int32_t(h & 0x7FFFFFFF);  // never a vocabulary id
  }
  return key;
}

void MultimodalPrompt::add_embeds(int64_t start_pos, int32_t n, int32_t token_offset,
                                  ForwardBatch& batch) const {
  auto it = std::lower_bound(rows_.begin(), rows_.end(), start_pos,
                             [](const Row& r, int64_t p) { return r.pos < p; });
  for (; it != rows_.end() && it->pos < start_pos + n; ++it) {
    const int32_t at = token_offset + int32_t(it->pos - start_pos);
    batch.token_ids[at] = it->token;
    batch.embed_rows.push_back(at);
    const float* v = features_[it->item]->data() + size_t(it->row) * hidden_;
    batch.embed_values.insert(batch.embed_values.end(), v, v + hidden_);
  }
}

}  // namespace m3
