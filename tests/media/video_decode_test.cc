// Video decoding: the frames decode_video picks from the fixture videos (H.264 in MP4, VP8 in WebM without a
// frame count, Motion JPEG in AVI with full-range YUV), compared with the frames the ffmpeg command line
// decodes (`ffmpeg -i V -f rawvideo -pix_fmt rgb24`, tests/fixtures/vision/videos/*.rgb); vLLM's MiniMax-M3
// frame sampling on hand-worked cases; bad input and limits fail with a clear kInvalidArgument.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "media/video_decode.h"

using m3::media::decode_video;
using m3::media::FrameSampling;
using m3::media::RgbImage;
using m3::media::sample_frame_indices;
using m3::media::VideoInfo;
using m3::media::VideoLimits;
using Bytes = std::vector<uint8_t>;
using Ids = std::vector<int64_t>;

namespace {

const std::string kDir = "tests/fixtures/vision/videos/";

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

struct Decoded {
  VideoInfo info;
  std::vector<RgbImage> frames;
};

Decoded decode(const Bytes& bytes, const FrameSampling& s = {}, const VideoLimits& limits = {}) {
  Decoded d;
  d.info = decode_video(bytes, s, limits, [&](RgbImage&& f) { d.frames.push_back(std::move(f)); });
  return d;
}

m3::ErrorKind error_kind(const Bytes& bytes, const FrameSampling& s = {}, const VideoLimits& limits = {},
                         std::string* message = nullptr) {
  try {
    decode(bytes, s, limits);
  } catch (const m3::Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  return m3::ErrorKind::kInternal;  // "no error" reads as a failure in the tests below
}

}  // namespace

TEST(SampleFrameIndices, OneFramePerSecondAsVllmsMiniMaxLoader) {
  EXPECT_EQ(sample_frame_indices(10, 4.0, {}, 768), (Ids{0, 4, 8, 9}));  // the last frame is 0.25 s on
  EXPECT_EQ(sample_frame_indices(11, 2.0, {}, 768), (Ids{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(sample_frame_indices(10, 1.0, {}, 768), (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(sample_frame_indices(9, 4.0, {}, 768), (Ids{0, 4, 8}));  // the last frame is the last taken
  // 29.97 fps: ceil((t + 1 - 1e-4) * 29.97) from the frame taken before.
  EXPECT_EQ(sample_frame_indices(100, 29.97, {}, 768), (Ids{0, 30, 60, 90, 99}));
  EXPECT_EQ(sample_frame_indices(20, 4.0, {.fps = 2.0}, 768), (Ids{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19}));
  EXPECT_EQ(sample_frame_indices(1, 25.0, {}, 768), (Ids{0}));
  EXPECT_EQ(sample_frame_indices(0, 25.0, {}, 768), (Ids{}));
  // Frames closer than 1e-4 s to the last one taken are not appended.
  EXPECT_EQ(sample_frame_indices(3, 1.0, {.fps = 0.5}, 768), (Ids{0, 2}));
}

TEST(SampleFrameIndices, NumFramesIsLinspaceAndMaxFramesThins) {
  EXPECT_EQ(sample_frame_indices(10, 4.0, {.num_frames = 4}, 768), (Ids{0, 3, 6, 9}));
  EXPECT_EQ(sample_frame_indices(10, 4.0, {.num_frames = 3}, 768), (Ids{0, 4, 9}));
  EXPECT_EQ(sample_frame_indices(5, 4.0, {.num_frames = 32}, 768), (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(sample_frame_indices(5, 4.0, {.num_frames = 1}, 768), (Ids{0}));
  // 100 s at 1 fps would be 100 frames: thinned to 5 spread over the whole video.
  EXPECT_EQ(sample_frame_indices(100, 1.0, {}, 5), (Ids{0, 24, 49, 74, 99}));
  EXPECT_EQ(sample_frame_indices(10, 4.0, {.num_frames = 8}, 2), (Ids{0, 9}));
}

// Each fixture's frames against the ffmpeg tool's, at the indices sampling picks.
struct Fixture {
  const char* file;
  int width, height, total;
  double fps;
  Ids indices;
  const char* codec;
};

class VideoFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(VideoFixture, FramesEqualTheFfmpegTools) {
  const Fixture& fx = GetParam();
  const std::string name = std::string(fx.file).substr(0, std::string(fx.file).find('.'));
  const Decoded d = decode(read_file(kDir + fx.file));
  EXPECT_EQ(d.info.width, fx.width);
  EXPECT_EQ(d.info.height, fx.height);
  EXPECT_EQ(d.info.total_frames, fx.total);
  EXPECT_DOUBLE_EQ(d.info.fps, fx.fps);
  EXPECT_EQ(d.info.codec, fx.codec);
  ASSERT_EQ(d.info.indices, fx.indices);
  ASSERT_EQ(d.frames.size(), fx.indices.size());
  const Bytes all = read_file(kDir + name + ".rgb");  // every frame, as the ffmpeg tool decodes them
  const size_t frame_bytes = size_t(fx.width) * fx.height * 3;
  ASSERT_EQ(all.size(), frame_bytes * fx.total);
  for (size_t i = 0; i < d.frames.size(); ++i) {
    const RgbImage& f = d.frames[i];
    ASSERT_EQ(f.width, fx.width);
    ASSERT_EQ(f.height, fx.height);
    ASSERT_EQ(f.pixels.size(), frame_bytes);
    const uint8_t* want = all.data() + frame_bytes * size_t(fx.indices[i]);
    size_t differ = 0;
    for (size_t k = 0; k < frame_bytes; ++k) differ += f.pixels[k] != want[k];
    EXPECT_EQ(differ, 0u) << fx.file << " frame " << fx.indices[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, VideoFixture,
    ::testing::Values(Fixture{"clip.mp4", 84, 56, 10, 4.0, {0, 4, 8, 9}, "h264"},
                      Fixture{"tall.webm", 50, 90, 11, 2.0, {0, 2, 4, 6, 8, 10}, "vp8"},
                      Fixture{"long.avi", 56, 56, 10, 1.0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "mjpeg"}),
    [](const auto& info) { return std::string(info.param.codec); });

TEST(DecodeVideo, NumFramesSampling) {
  const Decoded d = decode(read_file(kDir + "clip.mp4"), {.num_frames = 3});
  EXPECT_EQ(d.info.indices, (Ids{0, 4, 9}));
  EXPECT_EQ(d.frames.size(), 3u);
}

TEST(DecodeVideo, BadInputIsAClearError) {
  std::string msg;
  EXPECT_EQ(error_kind(Bytes{}, {}, {}, &msg), m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  Bytes junk(4096);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = uint8_t(i * 7919 >> 3);
  EXPECT_EQ(error_kind(junk, {}, {}, &msg), m3::ErrorKind::kInvalidArgument) << msg;
  // FFmpeg would read a still image as a one-frame video; it is refused with the part to use instead.
  EXPECT_EQ(error_kind(read_file("tests/fixtures/vision/images/square.png"), {}, {}, &msg),
            m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("image_url"), std::string::npos) << msg;
  // A truncated file: an error, or the frames that survive; never a crash.
  Bytes clip = read_file(kDir + "clip.mp4");
  for (size_t keep : {size_t(16), size_t(200), clip.size() / 2, clip.size() - 100}) {
    Bytes cut(clip.begin(), clip.begin() + long(keep));
    try {
      const Decoded d = decode(cut);
      EXPECT_FALSE(d.frames.empty());
    } catch (const m3::Error& e) {
      EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
    }
  }
}

TEST(DecodeVideo, LimitsAreEnforcedWithTheirNumbers) {
  const Bytes clip = read_file(kDir + "clip.mp4");
  std::string msg;
  EXPECT_EQ(error_kind(clip, {}, {.max_bytes = 1000}, &msg), m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("--max-video-bytes"), std::string::npos) << msg;
  EXPECT_EQ(error_kind(clip, {}, {.max_frame_pixels = 84 * 56 - 1}, &msg), m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("84 x 56"), std::string::npos) << msg;
  EXPECT_EQ(error_kind(clip, {}, {.max_stream_frames = 9}, &msg), m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("10 frames"), std::string::npos) << msg;
  // WebM says no frame count: the packets are counted, and the limit holds there too.
  EXPECT_EQ(error_kind(read_file(kDir + "tall.webm"), {}, {.max_stream_frames = 5}, &msg),
            m3::ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("more than 5 frames"), std::string::npos) << msg;
  // Sampled frames past max_sampled_frames are thinned, not refused.
  const Decoded d = decode(clip, {}, {.max_sampled_frames = 2});
  EXPECT_EQ(d.info.indices, (Ids{0, 9}));
}
