// Images and videos in chat requests, on the server's side: the image / video parts of OpenAI-shaped messages
// (Anthropic image blocks arrive converted, chat/api/anthropic_request.h) are loaded (media/media_url.h),
// decoded (media/image_decode.h, media/video_decode.h) and run through the released processors
// (media/image_preprocess.h), and the prompt's one placeholder per item, as the chat template renders it, is
// expanded the way the processor does. An image: ]<]start of image[>[, one ]<]image[>[ per merged patch,
// ]<]end of image[>[. A video, for each temporal patch of two frames: the text "]<]2.0 seconds[>[" (its first
// frame's time), then the image markers around one ]<]video[>[ per merged patch of a frame. Errors are 400s
// naming the part ("messages[1].content[2]: ...").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "engine/multimodal.h"
#include "media/image_decode.h"
#include "media/image_preprocess.h"
#include "media/media_url.h"
#include "media/video_decode.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct MediaOptions {
  media::MediaPolicy policy;       // --allowed-local-media-path, --allowed-media-domains
  media::DecodeLimits decode;      // bytes (--max-image-bytes, for the URL's bytes too) and pixels per image
  media::VideoLimits video;        // --max-video-bytes, --max-video-frames
  media::FrameSampling sampling;   // --media-io-kwargs '{"video": {"fps": F, "num_frames": N}}'
  int max_images_per_prompt = 16;  // --limit-mm-per-prompt '{"image": N, "video": M}'
  int max_videos_per_prompt = 4;
};

// What a model's media inputs need: its placeholder ids (the tokenizer's vision start / end markers and the
// config's image and video tokens), its processors' patch sizes and its tokenizer (for video timestamps);
// `enabled` is false for a model without a vision tower.
struct MediaModel {
  bool enabled = false;
  int32_t image = -1, video = -1, start = -1, end = -1;
  media::ImageProcessorConfig processor;
  media::ImageProcessorConfig video_processor = media::video_processor_config();
  std::optional<Tokenizer> tokenizer;
  static MediaModel of(const ModelConfig& config, bool has_vision, const Tokenizer& tokenizer);
};

// Whether any message of an OpenAI-shaped conversation has an image or video part.
bool has_media_parts(const nlohmann::ordered_json& messages);

// Loads, decodes and preprocesses every image and video part of `messages`, expands their placeholders in
// `ids` (one per item, as rendered) and returns the engine's inputs in prompt order. Throws
// m3::Error(kInvalidArgument), or kUnsupported for a video where FFmpeg is not installed.
std::vector<MultimodalInput> attach_media(const nlohmann::ordered_json& messages, std::vector<int32_t>& ids,
                                          const MediaModel& model, const MediaOptions& options);

// The "]<]x.y seconds[>[" text before each temporal patch of a video: its first frame's index / fps, one
// decimal, as the processor formats it (frames_indices[min(i * temporal_patch, n - 1)] / fps).
std::vector<std::string> video_timestamps(const media::VideoInfo& info, int grid_t, int temporal_patch_size);

}  // namespace m3
