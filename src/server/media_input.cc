// Chat image parts -> decoded, preprocessed vision inputs and the expanded placeholders.
#include "server/media_input.h"

#include <string>

#include "common/error.h"

namespace m3 {
namespace {

using nlohmann::ordered_json;

struct MediaPart {
  std::string where, kind, url;  // kind: image | video
};

// The URL of an image_url / input_image / video_url part ({"url": ...} or a bare string).
std::string part_url(const ordered_json& part, const char* field, const std::string& where) {
  if (!part.contains(field)) fail_field(where + ": needs '" + field + "'", "messages");
  const ordered_json& v = part[field];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("url") && v["url"].is_string()) return v["url"].get<std::string>();
  fail_field(where + ": '" + field + "' must be a URL or {\"url\": ...}", "messages");
}

std::vector<MediaPart> media_parts(const ordered_json& messages) {
  std::vector<MediaPart> out;
  if (!messages.is_array()) return out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    const ordered_json& parts = m["content"];
    for (size_t k = 0; k < parts.size(); ++k) {
      const ordered_json& p = parts[k];
      if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) continue;
      const std::string type = p["type"].get<std::string>();
      const std::string where = "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
      if (type == "image_url" || type == "input_image")
        out.push_back({where, "image", part_url(p, "image_url", where)});
      else if (type == "video_url")
        out.push_back({where, "video", part_url(p, "video_url", where)});
      else if (type == "image" || type == "image_pil" || type == "image_embeds" || type == "video")
        fail_field(where + ": '" + type + "' parts are not supported; send an image_url", "messages");
    }
  }
  return out;
}

}  // namespace

MediaModel MediaModel::of(const ModelConfig& config, bool has_vision, const Tokenizer& tokenizer) {
  MediaModel t;
  if (!config.has_vision || !has_vision) return t;
  t.image = config.vision.image_token_id;
  t.processor.patch_size = config.vision.patch_size;
  t.processor.temporal_patch_size = config.vision.temporal_patch_size;
  t.processor.merge_size = config.vision.spatial_merge_size;
  t.start = tokenizer.token_to_id("]<]start of image[>[").value_or(-1);
  t.end = tokenizer.token_to_id("]<]end of image[>[").value_or(-1);
  t.enabled = t.start >= 0 && t.end >= 0;
  return t;
}

bool has_media_parts(const ordered_json& messages) {
  if (!messages.is_array()) return false;
  for (const ordered_json& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const ordered_json& p : m["content"]) {
      if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) continue;
      const std::string type = p["type"].get<std::string>();
      if (type.find("image") != std::string::npos || type.find("video") != std::string::npos) return true;
    }
  }
  return false;
}

std::vector<MultimodalInput> attach_media(const ordered_json& messages, std::vector<int32_t>& ids,
                                          const MediaModel& model, const MediaOptions& options) {
  const std::vector<MediaPart> parts = media_parts(messages);
  if (parts.empty()) return {};
  if (!model.enabled)
    fail_field(parts[0].where + ": this model does not take image or video input (it has no vision tower)",
               "messages");
  int images = 0;
  for (const MediaPart& p : parts) {
    if (p.kind == "video")
      fail_field(p.where + ": video input is not supported by this server yet", "messages");
    if (++images > options.max_images_per_prompt)
      fail_field("at most " + std::to_string(options.max_images_per_prompt) +
                     " image(s) may be sent per prompt (--limit-mm-per-prompt)",
                 "messages");
  }
  media::MediaPolicy policy = options.policy;
  policy.max_bytes = options.decode.max_bytes;
  std::vector<MultimodalInput> inputs;
  for (const MediaPart& p : parts) {
    try {
      const std::vector<uint8_t> bytes = media::load_media_url(p.url, policy);
      const media::RgbImage image = media::decode_image(bytes, options.decode);
      MultimodalInput in;
      in.patches = media::preprocess_image(image, model.processor);
      in.hash = multimodal_hash(in.patches);
      inputs.push_back(std::move(in));
    } catch (const Error& e) {  // the client's media: say which part
      if (e.kind() != ErrorKind::kInvalidArgument) throw;
      fail_field(p.where + ": " + e.what(), "messages");
    }
  }
  // One placeholder per image, as the template rendered them, in order.
  std::vector<int32_t> out;
  out.reserve(ids.size());
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != model.image) {
      out.push_back(id);
      continue;
    }
    if (next == inputs.size()) fail_field("the prompt has more image placeholders than images", "messages");
    const int64_t n =
        inputs[next++].patches.num_patches() / (model.processor.merge_size * model.processor.merge_size);
    out.push_back(model.start);
    out.insert(out.end(), size_t(n), model.image);
    out.push_back(model.end);
  }
  if (next != inputs.size())
    fail_field("the chat template rendered " + std::to_string(next) + " of the " +
                   std::to_string(inputs.size()) + " images (images go in user messages)",
               "messages");
  ids = std::move(out);
  return inputs;
}

}  // namespace m3
