// The CUDA vision tower against the CPU reference (model/vision_tower.h, itself checked against transformers
// in tests/golden/vision_golden_test.cc) on m3-tiny-vl and the fixture images, including a video grid split
// into segments; and greedy generation with an image on --device cuda against the reference's ids.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/engine.h"
#include "gpu_util.h"
#include "loader/checkpoint.h"
#include "media/image_decode.h"
#include "model/cuda_vision.h"
#include "model/vision_tower.h"
#include "support/engine_run.h"
#include "support/model_fixtures.h"
#include "support/requests.h"

namespace m3::testing {
namespace {

media::VisionPatches image_patches(const std::string& file) {
  std::ifstream in("tests/fixtures/vision/images/" + file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return media::preprocess_image(media::decode_image(bytes));
}

TEST(CudaVision, FeaturesMatchTheCpuReference) {
  M3_REQUIRE_GPU();
  const std::string dir = fixture_model_dir("m3-tiny-vl");
  const ModelConfig config = load_model_config(dir);
  const Checkpoint ckpt(dir);
  const VisionTower cpu(ckpt, config);
  const CudaVisionTower gpu(ckpt, config, 0);
  for (const char* file : {"square.png", "wide.png", "small_rgba.png", "photo.jpg", "large.png"}) {
    const media::VisionPatches p = image_patches(file);
    EXPECT_LT(rel_error(gpu.encode(p), cpu.encode(p)), 2e-2) << file;  // bf16 GEMM inputs
  }
  // A video grid of 6 temporal patches: segments of 4 and 2 (vision_segment_max_frames 4).
  media::VisionPatches video = image_patches("square.png");
  const media::VisionPatches frame = video;
  video.t = 6;
  for (int i = 1; i < 6; ++i)
    video.values.insert(video.values.end(), frame.values.begin(), frame.values.end());
  for (size_t i = 0; i < video.values.size(); ++i) video.values[i] += 0.01f * float(i % 97);
  EXPECT_LT(rel_error(gpu.encode(video), cpu.encode(video)), 2e-2);
  video.h = 3;  // not a multiple of the merge size
  EXPECT_THROW(gpu.encode(video), Error);
}

TEST(CudaVision, GreedyIdsWithAnImageMatchTheReference) {
  M3_REQUIRE_GPU();
  std::ifstream in("tests/fixtures/goldens/m3-tiny-vl.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::ifstream meta_in("tests/fixtures/vision/goldens.json");
  const nlohmann::json meta = nlohmann::json::parse(meta_in);
  BackendOptions o;
  o.device = "cuda";
  o.num_kv_pages = 64;
  Engine engine(load_backend(fixture_model_dir("m3-tiny-vl"), o), EngineOptions{});
  for (const auto& p : golden["image_prompts"]) {
    const std::string name = p["image"].get<std::string>();
    Request r = greedy(p["prompt_token_ids"].get<std::vector<int32_t>>(), p["max_tokens"].get<int>());
    MultimodalInput item;
    item.patches = image_patches(meta["images"][name]["file"].get<std::string>());
    item.hash = multimodal_hash(item.patches);
    r.mm.push_back(std::move(item));
    const std::vector<TokenEvent> events = run_alone(engine, r);
    const auto want = p["output_token_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(events.size(), want.size()) << name;
    for (size_t s = 0; s < want.size(); ++s) {  // bf16 on the GPU: compare while the margin is clear
      if (p["steps"][s]["margin"].get<float>() < 0.05f) break;
      EXPECT_EQ(events[s].token, want[s]) << name << " step " << s;
      if (events[s].token != want[s]) break;
    }
  }
}

}  // namespace
}  // namespace m3::testing
