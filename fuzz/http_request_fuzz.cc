// Fuzzes what a connection runs on untrusted bytes, without sockets: the RequestReader over the input cut
// into pieces (the first byte picks the piece size, so the same bytes arrive in different TCP segmentations),
// every pipelined request in it, and the Content-Encoding decoder on each complete request.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/decompress.h"
#include "http/request_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t piece = 1 + data[0] % 64;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  m3::http::ServerLimits limits;
  limits.max_body_bytes = 1 << 16;
  limits.max_header_bytes = 2048;
  limits.max_headers = 32;
  limits.max_target_bytes = 512;
  m3::http::RequestReader reader(limits);
  std::string buffered;
  size_t offset = 0;
  for (;;) {
    buffered.erase(0, reader.feed(buffered));
    if (reader.state() == m3::http::RequestReader::State::kError) return 0;
    if (reader.state() == m3::http::RequestReader::State::kDone) {
      m3::http::Request request = reader.take_request();
      m3::http::decode_request_body(request, limits.max_body_bytes, true);
      (void)request.query_param("model");
      reader.reset();
      continue;
    }
    if (offset >= input.size()) return 0;
    size_t n = std::min(piece, input.size() - offset);
    buffered.append(input.substr(offset, n));
    offset += n;
  }
}
