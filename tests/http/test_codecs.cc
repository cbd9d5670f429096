// zlib / brotli encoders for the http tests; failures throw so a broken fixture cannot pass silently.
#include "test_codecs.h"

#include <brotli/encode.h>
#include <zlib.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace m3::http::test {

namespace {

// Deflates the pieces that `next` yields until it returns an empty view.
template <typename Next>
std::string deflate_stream(int window_bits, Next next) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::string out;
  std::vector<unsigned char> buf(1 << 16);
  for (bool last = false; !last;) {
    std::string_view piece = next();
    last = piece.empty();
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data()));
    zs.avail_in = static_cast<uInt>(piece.size());
    int flush = last ? Z_FINISH : Z_NO_FLUSH;
    int rc;
    do {
      zs.next_out = buf.data();
      zs.avail_out = static_cast<uInt>(buf.size());
      rc = deflate(&zs, flush);
      out.append(reinterpret_cast<const char*>(buf.data()), buf.size() - zs.avail_out);
    } while (zs.avail_out == 0 || (last && rc != Z_STREAM_END));
  }
  deflateEnd(&zs);
  return out;
}

}  // namespace

std::string zlib_compress(std::string_view data, int window_bits) {
  bool given = false;
  return deflate_stream(window_bits, [&]() -> std::string_view {
    if (given) return {};
    given = true;
    return data.empty() ? std::string_view() : data;
  });
}

std::string gzip(std::string_view data) {
  return zlib_compress(data, 15 + 16);
}

std::string gzip_zeros(size_t zero_bytes) {
  std::string zeros(64 << 10, '\0');
  size_t left = zero_bytes;
  return deflate_stream(15 + 16, [&]() -> std::string_view {
    size_t n = std::min(left, zeros.size());
    left -= n;
    return std::string_view(zeros.data(), n);
  });
}

std::string brotli(std::string_view data) {
  size_t size = BrotliEncoderMaxCompressedSize(data.size());
  std::string out(size == 0 ? 64 : size, '\0');
  if (!BrotliEncoderCompress(BROTLI_DEFAULT_QUALITY, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC, data.size(),
                             reinterpret_cast<const uint8_t*>(data.data()), &size,
                             reinterpret_cast<uint8_t*>(out.data()))) {
    throw std::runtime_error("BrotliEncoderCompress failed");
  }
  out.resize(size);
  return out;
}

}  // namespace m3::http::test
