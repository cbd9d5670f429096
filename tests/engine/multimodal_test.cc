// The engine's side of images (engine/multimodal.h): the encoder cache's LRU by bytes, placeholders matched
// to features in order (and the errors when the counts disagree), the prefix-cache key, and embed rows cut to
// a chunk.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/error.h"
#include "engine/multimodal.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

std::shared_ptr<const std::vector<float>> floats(size_t n, float v) {
  return std::make_shared<const std::vector<float>>(n, v);
}

TEST(EncoderCache, KeepsTheMostRecentlyUsedWithinItsBytes) {
  EncoderCache cache(3 * 4 * 4);  // three features of 4 floats
  cache.put(1, floats(4, 1));
  cache.put(2, floats(4, 2));
  cache.put(3, floats(4, 3));
  ASSERT_NE(cache.get(1), nullptr);  // 1 is now the most recent; 2 the least
  cache.put(4, floats(4, 4));
  EXPECT_EQ(cache.get(2), nullptr);
  EXPECT_NE(cache.get(1), nullptr);
  EXPECT_NE(cache.get(3), nullptr);
  EXPECT_EQ(cache.get(4)->at(0), 4.0f);
  cache.put(5, floats(100, 5));  // larger than the whole cache: not kept, nothing evicted
  EXPECT_EQ(cache.get(5), nullptr);
  EXPECT_NE(cache.get(1), nullptr);
}

// A 1 x 2 x 2 grid of patch values v: one token of m3-tiny-vl (merge 2).
MultimodalInput item(float v) {
  MultimodalInput in;
  in.patches.t = 1, in.patches.h = 2, in.patches.w = 2;
  in.patches.values.assign(4 * 3 * 2 * 14 * 14, v);
  in.hash = multimodal_hash(in.patches);
  return in;
}

TEST(MultimodalPrompt, PlacesFeaturesOnThePlaceholdersInOrder) {
  auto backend = load_fixture("m3-tiny-vl");
  const int32_t img = backend->config().vision.image_token_id;
  const int hidden = backend->config().hidden_size;
  EncoderCache cache(1 << 20);
  const std::vector<int32_t> prompt = {7, img, 8, img, 9};
  const std::vector<MultimodalInput> items = {item(0.1f), item(-0.3f)};
  const MultimodalPrompt mm(prompt, items, *backend, cache);

  const std::vector<int32_t> key = mm.cache_key(prompt);
  EXPECT_EQ(key[0], 7);
  EXPECT_EQ(key[2], 8);
  EXPECT_LT(key[1], 0);
  EXPECT_LT(key[3], 0);
  EXPECT_NE(key[1], key[3]) << "different images, different keys";
  EXPECT_NE(multimodal_hash(items[0].patches), multimodal_hash(items[1].patches));

  // A chunk of positions [2, 5) at batch tokens 10.. holds the second placeholder only.
  ForwardBatch batch;
  batch.token_ids.assign(13, 0);
  std::copy(key.begin() + 2, key.end(), batch.token_ids.begin() + 10);
  mm.add_embeds(2, 3, 10, batch);
  ASSERT_EQ(batch.embed_rows, std::vector<int32_t>({11}));
  EXPECT_EQ(batch.token_ids[11], img) << "the model sees the placeholder id, not the key";
  ASSERT_EQ(batch.embed_values.size(), size_t(hidden));
  EXPECT_EQ(batch.embed_values, *cache.features_of(items[1], *backend));
  EXPECT_NE(batch.embed_values, *cache.features_of(items[0], *backend));
}

TEST(MultimodalPrompt, CountsThatDisagreeAreInvalidArguments) {
  auto backend = load_fixture("m3-tiny-vl");
  const int32_t img = backend->config().vision.image_token_id;
  EncoderCache cache(1 << 20);
  auto kind_of = [&](const std::vector<int32_t>& prompt, const std::vector<MultimodalInput>& items) {
    try {
      MultimodalPrompt(prompt, items, *backend, cache);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // no error
  };
  EXPECT_EQ(kind_of({1, img, img}, {item(0.5f)}), ErrorKind::kInvalidArgument);  // a placeholder too many
  EXPECT_EQ(kind_of({1, 2}, {item(0.5f)}), ErrorKind::kInvalidArgument);         // none for the image
  auto text_only = load_fixture("m3-tiny-text-sharded");  // a text-only checkpoint: no vision tower
  ASSERT_FALSE(text_only->has_vision());
  try {
    MultimodalPrompt({1, text_only->config().vision.image_token_id}, {item(0.5f)}, *text_only, cache);
    FAIL() << "a model without a vision tower must refuse images";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace m3::testing
