// Fuzz target for video decoding (request videos are untrusted bytes): whatever FFmpeg makes of them through
// decode_video. Every failure must surface as m3::Error(kInvalidArgument); crashes, hangs and leaks are bugs.
// Frames handed to the sink must have the announced size and exactly width * height * 3 bytes.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/error.h"
#include "media/video_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  m3::media::VideoLimits limits;
  limits.max_frame_pixels = int64_t(1) << 20;  // keep each run fast; the limit checks are under test too
  limits.max_stream_frames = 2000;
  limits.max_sampled_frames = 8;
  try {
    int frames = 0;
    const m3::media::VideoInfo info = m3::media::decode_video(
        std::span<const uint8_t>(data, size), {}, limits, [&](m3::media::RgbImage&& f) {
          ++frames;
          if (f.width <= 0 || f.height <= 0 || f.pixels.size() != size_t(f.width) * size_t(f.height) * 3)
            std::abort();
        });
    if (frames == 0 || size_t(frames) != info.indices.size() || frames > limits.max_sampled_frames)
      std::abort();
  } catch (const m3::Error& e) {
    if (e.kind() != m3::ErrorKind::kInvalidArgument) std::abort();
  }
  return 0;
}
