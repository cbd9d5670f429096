// Fuzz target for image decoding (request images are untrusted bytes): JPEG, PNG and WebP through
// decode_image. Every failure must surface as m3::Error(kInvalidArgument); crashes, hangs, leaks and
// longjmps past C++ frames are bugs. A decoded image must have exactly width * height * 3 bytes.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/error.h"
#include "media/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  m3::media::DecodeLimits limits;
  limits.max_pixels = int64_t(1) << 22;  // keep each run fast; the limit check itself is under test too
  try {
    m3::media::RgbImage image = m3::media::decode_image(std::span<const uint8_t>(data, size), limits);
    if (image.width <= 0 || image.height <= 0 ||
        image.pixels.size() != size_t(image.width) * size_t(image.height) * 3)
      std::abort();
  } catch (const m3::Error& e) {
    if (e.kind() != m3::ErrorKind::kInvalidArgument) std::abort();
  }
  return 0;
}
