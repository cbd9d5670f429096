// Chat image and video parts -> decoded, preprocessed vision inputs and the expanded placeholders.
#include "server/media_input.h"

#include <cstdio>
#include <string>
#include <unordered_set>

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
        fail_field(where + ": '" + type + "' parts are not supported; send an image_url or video_url",
                   "messages");
    }
  }
  return out;
}

// One loaded item: the tower's input and, for a video, which frames it holds.
struct LoadedItem {
  MultimodalInput input;
  media::VideoInfo video;
};

LoadedItem load_item(const MediaPart& p, const MediaModel& model, const MediaOptions& options) {
  LoadedItem item;
  media::MediaPolicy policy = options.policy;
  if (p.kind == "image") {
    policy.max_bytes = options.decode.max_bytes;
    const media::RgbImage image = media::decode_image(media::load_media_url(p.url, policy), options.decode);
    item.input.patches = media::preprocess_image(image, model.processor);
  } else {
    policy.max_bytes = options.video.max_bytes;
    item.input.patches = media::preprocess_video_bytes(media::load_media_url(p.url, policy), options.sampling,
                                                       options.video, model.video_processor, &item.video);
  }
  item.input.hash = multimodal_hash(item.input.patches);
  return item;
}

// Appends a video's placeholder run to `out`. The first timestamp is text that follows whatever text the
// template put before the placeholder, and the processor tokenizes it there, in context (":]<]0.0" can be one
// token): the ids since the last added token are decoded and encoded again with it.
void expand_video(const LoadedItem& v, const MediaModel& model, std::vector<int32_t>& out) {
  const Tokenizer& tok = *model.tokenizer;
  const media::VisionPatches& g = v.input.patches;
  const int merge = model.video_processor.merge_size * model.video_processor.merge_size;
  const int64_t per_frame = int64_t(g.h) * g.w / merge;
  const std::vector<std::string> ts =
      video_timestamps(v.video, g.t, model.video_processor.temporal_patch_size);
  const std::vector<int32_t> added_ids = tok.added_token_ids();
  const std::unordered_set<int32_t> added(added_ids.begin(), added_ids.end());
  for (int i = 0; i < g.t; ++i) {
    if (i == 0) {
      size_t from = out.size();
      while (from > 0 && !added.count(out[from - 1])) --from;
      const std::string text =
          tok.decode(std::span<const int32_t>(out.data() + from, out.size() - from)) + ts[0];
      out.resize(from);
      const std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false);
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      const std::vector<int32_t> ids = tok.encode(ts[size_t(i)], /*parse_special=*/false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    out.push_back(model.start);
    out.insert(out.end(), size_t(per_frame), model.video);
    out.push_back(model.end);
  }
}

}  // namespace

MediaModel MediaModel::of(const ModelConfig& config, bool has_vision, const Tokenizer& tokenizer) {
  MediaModel t;
  if (!config.has_vision || !has_vision) return t;
  t.image = config.vision.image_token_id;
  t.video = config.vision.video_token_id;
  for (media::ImageProcessorConfig* p : {&t.processor, &t.video_processor}) {
    p->patch_size = config.vision.patch_size;
    p->temporal_patch_size = config.vision.temporal_patch_size;
    p->merge_size = config.vision.spatial_merge_size;
  }
  t.start = tokenizer.token_to_id("]<]start of image[>[").value_or(-1);
  t.end = tokenizer.token_to_id("]<]end of image[>[").value_or(-1);
  t.tokenizer = tokenizer;
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

std::vector<std::string> video_timestamps(const media::VideoInfo& info, int grid_t, int temporal_patch_size) {
  std::vector<std::string> out;
  for (int i = 0; i < grid_t; ++i) {
    const size_t at = std::min(size_t(i) * size_t(temporal_patch_size), info.indices.size() - 1);
    char buf[64];
    std::snprintf(buf, sizeof buf, "]<]%.1f seconds[>[", double(info.indices[at]) / info.fps);
    out.push_back(buf);
  }
  return out;
}

std::vector<MultimodalInput> attach_media(const ordered_json& messages, std::vector<int32_t>& ids,
                                          const MediaModel& model, const MediaOptions& options) {
  const std::vector<MediaPart> parts = media_parts(messages);
  if (parts.empty()) return {};
  if (!model.enabled)
    fail_field(parts[0].where + ": this model does not take image or video input (it has no vision tower)",
               "messages");
  int images = 0, videos = 0;
  for (const MediaPart& p : parts) {
    const bool video = p.kind == "video";
    const int limit = video ? options.max_videos_per_prompt : options.max_images_per_prompt;
    if (++(video ? videos : images) > limit)
      fail_field("at most " + std::to_string(limit) + (video ? " video(s)" : " image(s)") +
                     " may be sent per prompt (--limit-mm-per-prompt)",
                 "messages");
  }
  std::vector<LoadedItem> image_items, video_items;
  for (const MediaPart& p : parts) {
    try {
      (p.kind == "video" ? video_items : image_items).push_back(load_item(p, model, options));
    } catch (const Error& e) {  // the client's media: say which part
      if (e.kind() != ErrorKind::kInvalidArgument && e.kind() != ErrorKind::kUnsupported) throw;
      fail_field(p.where + ": " + e.what(), "messages");
    }
  }
  // One placeholder per item, as the template rendered them; images and videos each in their own order, the
  // engine's inputs in the prompt's.
  std::vector<int32_t> out;
  out.reserve(ids.size());
  std::vector<MultimodalInput> inputs;
  size_t next_image = 0, next_video = 0;
  const int image_merge = model.processor.merge_size * model.processor.merge_size;
  for (int32_t id : ids) {
    if (id == model.image) {
      if (next_image == image_items.size())
        fail_field("the prompt has more image placeholders than images", "messages");
      LoadedItem& item = image_items[next_image++];
      out.push_back(model.start);
      out.insert(out.end(), size_t(item.input.patches.num_patches() / image_merge), model.image);
      out.push_back(model.end);
      inputs.push_back(std::move(item.input));
    } else if (id == model.video) {
      if (next_video == video_items.size())
        fail_field("the prompt has more video placeholders than videos", "messages");
      LoadedItem& item = video_items[next_video++];
      expand_video(item, model, out);
      inputs.push_back(std::move(item.input));
    } else {
      out.push_back(id);
    }
  }
  if (next_image != image_items.size() || next_video != video_items.size())
    fail_field("the chat template rendered " + std::to_string(next_image + next_video) + " of the " +
                   std::to_string(parts.size()) + " images and videos (they go in user messages)",
               "messages");
  ids = std::move(out);
  return inputs;
}

}  // namespace m3
