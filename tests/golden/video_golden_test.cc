// The video path against the reference (tests/fixtures/vision/video_goldens.*,
// tools/goldens/make_video_goldens.py on the GPU machine): the video processor's pixel values for the frames
// the ffmpeg tool decodes (1e-6), the same from our own decoding of the fixture files, the vision tower,
// projector and merger of m3-tiny-vl (a video of 5 temporal patches in two attention segments included), and
// greedy generation with a video in the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "loader/safetensors.h"
#include "media/image_preprocess.h"
#include "media/video_decode.h"
#include "support/engine_run.h"
#include "support/golden_tensors.h"
#include "support/model_fixtures.h"
#include "support/requests.h"

namespace m3::testing {
namespace {

const std::string kDir = "tests/fixtures/vision/";

struct Goldens : GoldenTensors {
  Goldens() : GoldenTensors(kDir + "video_goldens") {}
};

std::string stem(const std::string& file) {
  return file.substr(0, file.find('.'));
}

// The frames the reference took: the ffmpeg tool's decoding at the golden's indices.
std::vector<media::RgbImage> reference_frames(const nlohmann::json& v) {
  const int w = v["size"][0].get<int>(), h = v["size"][1].get<int>();
  const std::vector<uint8_t> all = read_bytes(kDir + "videos/" + stem(v["file"].get<std::string>()) + ".rgb");
  const size_t bytes = size_t(w) * h * 3;
  std::vector<media::RgbImage> frames;
  for (int64_t i : v["indices"].get<std::vector<int64_t>>()) {
    media::RgbImage f;
    f.width = w;
    f.height = h;
    f.pixels.assign(all.begin() + ptrdiff_t(bytes * i), all.begin() + ptrdiff_t(bytes * (i + 1)));
    frames.push_back(std::move(f));
  }
  return frames;
}

// decode_video from the file, then the processor, as the server runs them.
media::VisionPatches decode_and_preprocess(const nlohmann::json& v, media::VideoInfo* info = nullptr) {
  return media::preprocess_video_bytes(read_bytes(kDir + "videos/" + v["file"].get<std::string>()), {}, {},
                                       media::video_processor_config(), info);
}

TEST(VideoGolden, PixelValuesMatchTheVideoProcessor) {
  Goldens g;
  ASSERT_EQ(g.meta["videos"].size(), 3u);
  for (const auto& [name, v] : g.meta["videos"].items()) {
    SCOPED_TRACE(name);
    const std::vector<float> want = g.f32(name + ".pixel_values");
    const media::VisionPatches p =
        media::preprocess_video(reference_frames(v), media::video_processor_config());
    EXPECT_EQ(std::vector<int>({p.t, p.h, p.w}), v["grid"].get<std::vector<int>>());
    EXPECT_LE(max_abs_diff(p.values, want), 1e-6f);
    media::VideoInfo info;
    const media::VisionPatches d = decode_and_preprocess(v, &info);
    EXPECT_EQ(info.indices, v["indices"].get<std::vector<int64_t>>());
    EXPECT_DOUBLE_EQ(info.fps, v["fps"].get<double>());
    EXPECT_LE(max_abs_diff(d.values, want), 1e-6f) << "from our decoding of " << v["file"];
  }
}

TEST(VideoGolden, TowerAndFeaturesMatchTheReferenceSegmentBySegment) {
  Goldens g;
  std::unique_ptr<ModelBackend> backend = load_fixture("m3-tiny-vl");
  ASSERT_TRUE(backend->has_vision());
  ASSERT_EQ(backend->config().vision.segment_max_frames, 4);
  bool segmented = false;
  for (const auto& [name, v] : g.meta["videos"].items()) {
    SCOPED_TRACE(name);
    media::VisionPatches p = decode_and_preprocess(v);
    p.values = g.f32(name + ".pixel_values");  // the tower on its own
    segmented |= p.t > 4;
    EXPECT_LT(rel_error(backend->encode_vision(p), g.f32(name + ".features")), 1e-4);
  }
  EXPECT_TRUE(segmented) << "one fixture video must have more than segment_max_frames temporal patches";
}

TEST(VideoGolden, GreedyIdsWithAVideoMatchTheReference) {
  Goldens g;
  Engine engine(load_fixture("m3-tiny-vl"), EngineOptions{});
  ASSERT_FALSE(g.meta["video_prompts"].empty());
  for (const auto& p : g.meta["video_prompts"]) {
    const std::string name = p["video"].get<std::string>();
    SCOPED_TRACE(name);
    Request r = greedy(p["prompt_token_ids"].get<std::vector<int32_t>>(), p["max_tokens"].get<int>());
    MultimodalInput item;
    item.patches = decode_and_preprocess(g.meta["videos"][name]);
    item.hash = multimodal_hash(item.patches);
    r.mm.push_back(std::move(item));
    const std::vector<TokenEvent> events = run_alone(engine, r);
    const auto want = p["output_token_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(events.size(), want.size());
    for (size_t s = 0; s < want.size(); ++s) {
      EXPECT_EQ(events[s].token, want[s]) << "step " << s;
      if (p["steps"][s]["margin"].get<float>() < 1e-3f) break;  // a near-tie: later ids may differ
      if (events[s].token != want[s]) break;
    }
  }
}

}  // namespace
}  // namespace m3::testing
