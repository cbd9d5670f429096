// Where a request's image or video comes from: an OpenAI image_url / video_url "url" (data: URLs with base64,
// file:// paths under --allowed-local-media-path, http(s) URLs only for hosts in --allowed-media-domains,
// fetched with media_fetch.h) or an Anthropic base64 source. Returns the encoded bytes; decoding is
// image_decode.h's and video_decode.h's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace m3::media {

struct MediaPolicy {
  std::string allowed_local_media_path;            // file:// URLs must resolve inside it; empty: refused
  std::vector<std::string> allowed_media_domains;  // http(s) hosts that may be fetched; empty: refused
  size_t max_bytes = size_t(20) << 20;
  int fetch_timeout_ms = 30000;  // an http(s) transfer, redirects each on their own
};

// The bytes a URL names. Throws m3::Error(kInvalidArgument) naming the problem and, where a server flag would
// allow it, the flag ("file:// URLs need --allowed-local-media-path", "'/etc/passwd' is outside ...").
std::vector<uint8_t> load_media_url(const std::string& url, const MediaPolicy& policy);

// Standard base64 (RFC 4648, padding optional, whitespace skipped). Throws kInvalidArgument on other bytes.
std::vector<uint8_t> decode_base64(std::string_view text);

}  // namespace m3::media
