// Image bytes -> 8-bit RGB pixels: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp), told apart by their
// first bytes. Pixels come out as Pillow's Image.convert("RGB") gives them, which is what the released
// processor sees: grey replicated, alpha dropped (not blended), palettes expanded, 16-bit samples cut to
// their high byte.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace m3::media {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // [height][width][3], row-major, R G B
};

struct DecodeLimits {
  size_t max_bytes = size_t(20) << 20;        // the encoded size
  int64_t max_pixels = int64_t(8192) * 8192;  // width x height, checked from the header before decoding
};

// Throws m3::Error(kInvalidArgument) with a message a client can act on: "not a JPEG, PNG or WebP image",
// "corrupt PNG: ...", "the image is 20000 x 20000 pixels; the limit is 67108864 pixels", ...
RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

// "jpeg", "png", "webp", or "" when the bytes are none of them.
std::string sniff_image_format(std::span<const uint8_t> bytes);

}  // namespace m3::media
