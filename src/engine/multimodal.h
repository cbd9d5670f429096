// Images and videos in a prompt, on the engine's side: each item's features come from the backend's vision
// tower once (an encoder cache keyed by the item's content hash serves repeats, as vLLM's processor cache
// does), are matched to the prompt's placeholder tokens in order, and are handed to the forward pass as embed
// rows of the chunks that cover them. The scheduler sees the placeholders as ids derived from the item's
// hash, so the prefix cache shares pages only between prompts with the same images at the same places
// (SGLang's pad_value); the model still receives the placeholder id.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "media/image_preprocess.h"
#include "model/backend.h"

namespace m3 {

// One image or video of a request: the vision tower's input and a hash of it (pixel values and grid), and its
// features once encoded ([tokens][hidden]; Engine::encode_media fills them on the submitting thread).
struct MultimodalInput {
  media::VisionPatches patches;
  uint64_t hash = 0;
  std::shared_ptr<const std::vector<float>> features;
};

// The 64-bit content hash of a VisionPatches (its grid and values), for MultimodalInput::hash.
uint64_t multimodal_hash(const media::VisionPatches& patches);

// Features by content hash, least recently used first out beyond `capacity_bytes`. Thread-safe.
class EncoderCache {
 public:
  explicit EncoderCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}
  using Features = std::shared_ptr<const std::vector<float>>;
  Features get(uint64_t hash);  // null when absent
  void put(uint64_t hash, Features features);
  // The item's features: already set, cached, or encoded by `backend` now (and cached).
  Features features_of(const MultimodalInput& item, const ModelBackend& backend);

 private:
  std::mutex mu_;
  size_t capacity_, bytes_ = 0;
  std::list<std::pair<uint64_t, Features>> lru_;  // most recent first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Features>>::iterator> index_;
};

// A request's items placed on its prompt.
class MultimodalPrompt {
 public:
  MultimodalPrompt() = default;
  // Encodes the items (through `cache`) and places them: the prompt's image / video placeholder tokens
  // (config.vision ids), in order, take the items' feature rows, in order. Throws kInvalidArgument when the
  // counts disagree or the model has no vision tower.
  MultimodalPrompt(const std::vector<int32_t>& prompt, const std::vector<MultimodalInput>& items,
                   const ModelBackend& backend, EncoderCache& cache);

  bool empty() const { return rows_.empty(); }
  // The prompt as the scheduler keys it: placeholders replaced by negative ids derived from (item hash, row).
  std::vector<int32_t> cache_key(const std::vector<int32_t>& prompt) const;
  // For the tokens [start_pos, start_pos + n) that sit at batch tokens from token_offset on: appends their
  // embed rows (ForwardBatch::embed_rows / embed_values) and puts the placeholder ids back in token_ids.
  void add_embeds(int64_t start_pos, int32_t n, int32_t token_offset, ForwardBatch& batch) const;

 private:
  struct Row {
    int32_t pos, item, row, token;
  };
  std::vector<Row> rows_;  // by position
  std::vector<uint64_t> hashes_;
  std::vector<EncoderCache::Features> features_;  // per item, [tokens][hidden]
  int hidden_ = 0;
};

}  // namespace m3
