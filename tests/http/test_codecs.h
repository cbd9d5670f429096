// Compressors for building test bodies (zlib for gzip / deflate, the brotli encoder for br), including a
// streamed gzip "bomb" built without ever holding its inflated form in memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace m3::http::test {

// window_bits: 15 + 16 gzip, 15 zlib-wrapped deflate, -15 raw deflate.
std::string zlib_compress(std::string_view data, int window_bits);
std::string gzip(std::string_view data);
std::string brotli(std::string_view data);
// gzip of `zero_bytes` zero bytes, compressed in 64 KiB pieces.
std::string gzip_zeros(size_t zero_bytes);

}  // namespace m3::http::test
