// The released MiniMax-M3 image and video processors (transformers' MiniMaxM3VLImageProcessor and
// MiniMaxM3VLVideoProcessor, torchvision backend) in C++: smart_resize to multiples of patch x merge within
// [min_pixels, max_pixels], torchvision's antialiased bicubic resize of uint8 RGB (bit-exact), rescale +
// normalise with the CLIP mean and std (float32, in torch's order), and patching into rows of channel x
// temporal x patch x patch values, the four patches of each 2 x 2 merge window consecutive. A still image is
// repeated over the temporal patch (grid t = 1); a video's frames are padded to a multiple of it by repeating
// the last.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "media/image_decode.h"

namespace m3::media {

struct ImageProcessorConfig {
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 4 * 28 * 28;
  int64_t max_pixels = 451584;  // 672 x 672
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
};

// The vision tower's input for one image (or one video).
struct VisionPatches {
  int t = 0, h = 0, w = 0;    // grid: temporal patches, patch rows, patch columns
  std::vector<float> values;  // [t * h * w][channels * temporal_patch * patch * patch]
  int64_t num_patches() const { return int64_t(t) * h * w; }
};

// The processor's smart_resize (Python's round-half-even included): {height, width}, multiples of `factor`.
// Throws kInvalidArgument when the aspect ratio exceeds 200 or a side is < 1.
std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels);

// torchvision.transforms.v2.functional.resize(uint8 image, [out_h, out_w], BICUBIC, antialias=True) on the
// CPU, bit-exact.
RgbImage resize_bicubic_antialias(const RgbImage& image, int out_height, int out_width);

// One axis of resize_bicubic_antialias, exposed for tests: output i reads input samples
// [first[i], first[i] + count[i]) with the fixed-point weights weights[i * stride + k] (value / 2^precision).
struct AxisFilter {
  int precision = 0;
  int stride = 0;
  std::vector<int> first, count;
  std::vector<int16_t> weights;
};
AxisFilter bicubic_antialias_filter(int in_size, int out_size);

// The frame an image or video frame becomes: smart_resize's size, resize_bicubic_antialias (the image itself,
// moved, when its size is kept).
RgbImage resize_for_vision(RgbImage image, const ImageProcessorConfig& config);

// Normalised patches of resized frames (all one size, sides multiples of patch x merge), padded to a multiple
// of the temporal patch by repeating the last frame: grid t = ceil(frames / temporal_patch_size).
VisionPatches patchify_frames(std::span<const RgbImage> frames, const ImageProcessorConfig& config);

// The whole processor for one image (a one-frame video: grid t = 1).
VisionPatches preprocess_image(const RgbImage& image, const ImageProcessorConfig& config = {});

// The released video processor (MiniMaxM3VLVideoProcessor with do_resize) for decoded frames: each resized
// within config.min_pixels / max_pixels (video_processor_config()), then patchify_frames.
VisionPatches preprocess_video(std::span<const RgbImage> frames, const ImageProcessorConfig& config);

// The video processor's parameters: per-frame pixels within [4 * 28 * 28, 768 * 28 * 28].
inline ImageProcessorConfig video_processor_config() {
  ImageProcessorConfig c;
  c.max_pixels = int64_t(768) * 28 * 28;
  return c;
}

}  // namespace m3::media
