// Video parts on the server's side: the placeholder a chat template renders for a video, expanded with its
// timestamps and frames, against what transformers' MiniMaxM3VLProcessor makes of the same text, frames and
// metadata with the real tokenizer (tests/fixtures/vision/video_goldens.json,
// tools/goldens/make_video_goldens.py); the timestamp text; limits and bad media as 400s naming the part.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "media/media_url.h"
#include "server/media_input.h"

namespace m3 {
namespace {

using nlohmann::ordered_json;

const std::string kVideos = "tests/fixtures/vision/videos/";

std::string data_url(const std::string& file, const std::string& type) {
  std::ifstream f(kVideos + file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out = "data:" + type + ";base64,";
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += b64[v >> 18];
    out += b64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? b64[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? b64[v & 63] : '=';
  }
  return out;
}

ordered_json user_with(const std::vector<ordered_json>& parts) {
  ordered_json content = ordered_json::array();
  for (const auto& p : parts) content.push_back(p);
  return ordered_json::array({{{"role", "user"}, {"content", content}}});
}

ordered_json video_part(const std::string& url) {
  return {{"type", "video_url"}, {"video_url", {{"url", url}}}};
}

struct Fixture {
  Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  MediaModel model;
  MediaOptions options;
  Fixture() {
    ModelConfig config;
    config.has_vision = true;  // the released vision config's ids and patch sizes (the defaults)
    model = MediaModel::of(config, /*has_vision=*/true, tok);
  }
};

TEST(MediaInput, VideoExpansionMatchesTheProcessor) {
  Fixture fx;
  ASSERT_TRUE(fx.model.enabled);
  nlohmann::json golden;
  std::ifstream("tests/fixtures/vision/video_goldens.json") >> golden;
  ASSERT_FALSE(golden["expansions"].empty());
  for (const auto& e : golden["expansions"]) {
    const std::string name = e["video"].get<std::string>(), text = e["text"].get<std::string>();
    SCOPED_TRACE(name + " in " + text);
    const std::string file = golden["videos"][name]["file"].get<std::string>();
    const std::string type = file.ends_with(".mp4") ? "video/mp4" : "video/webm";
    std::vector<int32_t> ids = fx.tok.encode(text);
    const std::vector<MultimodalInput> inputs =
        attach_media(user_with({video_part(data_url(file, type))}), ids, fx.model, fx.options);
    ASSERT_EQ(inputs.size(), 1u);
    const auto& grid = golden["videos"][name]["grid"];
    EXPECT_EQ(inputs[0].patches.t, grid[0].get<int>());
    EXPECT_EQ(inputs[0].patches.h, grid[1].get<int>());
    EXPECT_EQ(inputs[0].patches.w, grid[2].get<int>());
    EXPECT_EQ(ids, e["input_ids"].get<std::vector<int32_t>>());
  }
}

TEST(MediaInput, TimestampsAreTheFirstFrameOfEachTemporalPatch) {
  media::VideoInfo info;
  info.fps = 4.0;
  info.indices = {0, 4, 8, 9};
  EXPECT_EQ(video_timestamps(info, 2, 2),
            (std::vector<std::string>{"]<]0.0 seconds[>[", "]<]2.0 seconds[>["}));
  info.indices = {1, 3, 6};  // odd: the last temporal patch repeats frame 6
  EXPECT_EQ(video_timestamps(info, 2, 2),
            (std::vector<std::string>{"]<]0.2 seconds[>[", "]<]1.5 seconds[>["}));  // 0.25: half to even
  info.fps = 29.97;
  info.indices = {0, 30, 60, 90, 899};
  EXPECT_EQ(video_timestamps(info, 3, 2).back(), "]<]30.0 seconds[>[");
}

TEST(MediaInput, VideoLimitsAndBadVideosAre400sNamingThePart) {
  Fixture fx;
  const std::string clip = data_url("clip.mp4", "video/mp4");
  auto kind_of = [&](const ordered_json& messages, const MediaOptions& o, std::string* msg) {
    std::vector<int32_t> ids = fx.tok.encode("]<]video[>[]<]video[>[");
    try {
      attach_media(messages, ids, fx.model, o);
    } catch (const Error& e) {
      *msg = e.what();
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  std::string msg;
  MediaOptions one = fx.options;
  one.max_videos_per_prompt = 1;
  EXPECT_EQ(kind_of(user_with({video_part(clip), video_part(clip)}), one, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("at most 1 video(s)"), std::string::npos) << msg;
  MediaOptions none = fx.options;
  none.max_videos_per_prompt = 0;
  EXPECT_EQ(kind_of(user_with({video_part(clip)}), none, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("--limit-mm-per-prompt"), std::string::npos) << msg;
  EXPECT_EQ(kind_of(user_with({video_part("data:video/mp4;base64,AAAAAAAA")}), fx.options, &msg),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("messages[0].content[0]"), std::string::npos) << msg;
  MediaOptions small = fx.options;
  small.video.max_bytes = 100;
  EXPECT_EQ(kind_of(user_with({video_part(clip)}), small, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("bytes"), std::string::npos) << msg;
  // Two videos rendered, one sent: the count mismatch is the client's.
  EXPECT_EQ(kind_of(user_with({video_part(clip)}), fx.options, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("video placeholders"), std::string::npos) << msg;
}

}  // namespace
}  // namespace m3
