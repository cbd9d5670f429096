// Images in chat requests, on the server's side: the image parts of OpenAI-shaped messages (Anthropic image
// blocks arrive converted, chat/api/anthropic_request.h) are loaded (media/media_url.h), decoded and run
// through the released processor (media/image_preprocess.h), and the prompt's one placeholder per image, as
// the chat template renders it, is expanded the way the processor does: ]<]start of image[>[, one ]<]image[>[
// per merged patch, ]<]end of image[>[. Errors are 400s naming the part ("messages[1].content[2]: ...").
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "engine/multimodal.h"
#include "media/image_decode.h"
#include "media/image_preprocess.h"
#include "media/media_url.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct MediaOptions {
  media::MediaPolicy policy;       // --allowed-local-media-path, --allowed-media-domains
  media::DecodeLimits decode;      // bytes (--max-image-bytes, for the URL's bytes too) and pixels per image
  int max_images_per_prompt = 16;  // --limit-mm-per-prompt '{"image": N}'
  int max_videos_per_prompt = 0;   // no video path yet
};

// What a model's image inputs need: its placeholder ids (the tokenizer's vision start / end markers and the
// config's image token) and its processor's patch sizes; `enabled` is false for a model without a vision
// tower.
struct MediaModel {
  bool enabled = false;
  int32_t image = -1, start = -1, end = -1;
  media::ImageProcessorConfig processor;
  static MediaModel of(const ModelConfig& config, bool has_vision, const Tokenizer& tokenizer);
};

// Whether any message of an OpenAI-shaped conversation has an image or video part.
bool has_media_parts(const nlohmann::ordered_json& messages);

// Loads, decodes and preprocesses every image part of `messages` (in order), expands the image placeholders
// of `ids` (one per image, as rendered) and returns the engine's inputs. Throws m3::Error(kInvalidArgument).
std::vector<MultimodalInput> attach_media(const nlohmann::ordered_json& messages, std::vector<int32_t>& ids,
                                          const MediaModel& model, const MediaOptions& options);

}  // namespace m3
