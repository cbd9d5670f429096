// Content-Encoding decoders over zlib (gzip, zlib-wrapped deflate with a raw-deflate fallback) and brotli.
// Each stage feeds its input in chunks and checks the output size after every chunk it produces, so memory
// stays at max_bytes plus one chunk whatever the compression ratio.
#include "http/decompress.h"

#include <brotli/decode.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "http/request_reader.h"

namespace m3::http {

namespace {

constexpr size_t kChunk = 64 << 10;

enum class Coding { kGzip, kDeflate, kBrotli };

const char* coding_name(Coding c) {
  switch (c) {
    case Coding::kGzip:
      return "gzip";
    case Coding::kDeflate:
      return "deflate";
    case Coding::kBrotli:
      return "br";
  }
  return "";
}

DecodeOutcome corrupt(Coding c, const std::string& detail) {
  return {400, std::string("request body is not valid ") + coding_name(c) + " data (" + detail + ")"};
}

DecodeOutcome too_large(Coding c, size_t max_bytes) {
  return {413, body_too_large_message(max_bytes) + " after " + coding_name(c) + " decompression"};
}

// One zlib pass. `window_bits`: 15 + 16 gzip, 15 zlib-wrapped deflate, -15 raw deflate. Sets `header_error`
// when the very first bytes were rejected (so the caller can retry "deflate" as raw deflate, which some
// clients send).
DecodeOutcome zlib_pass(std::string_view in, Coding c, int window_bits, size_t max_bytes, std::string& out,
                        bool& header_error) {
  header_error = false;
  z_stream zs{};
  if (inflateInit2(&zs, window_bits) != Z_OK) return {500, "cannot initialise zlib"};
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  auto buffer = std::make_unique<unsigned char[]>(kChunk);
  size_t offset = 0;
  bool produced = false;
  while (true) {
    if (zs.avail_in == 0 && offset < in.size()) {
      size_t n = std::min(kChunk, in.size() - offset);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + offset));
      zs.avail_in = static_cast<uInt>(n);
      offset += n;
    }
    zs.next_out = buffer.get();
    zs.avail_out = static_cast<uInt>(kChunk);
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t got = kChunk - zs.avail_out;
    if (got > 0) {
      produced = true;
      out.append(reinterpret_cast<const char*>(buffer.get()), got);
      if (out.size() > max_bytes) return too_large(c, max_bytes);
    }
    if (rc == Z_STREAM_END) {
      bool more = zs.avail_in > 0 || offset < in.size();
      if (!more) return {};
      // gzip allows several members back to back (RFC 1952 2.2); anything after a deflate stream is garbage.
      if (c != Coding::kGzip) return corrupt(c, "data after the end of the stream");
      if (inflateReset(&zs) != Z_OK) return corrupt(c, "cannot restart after a member");
      continue;
    }
    if (rc == Z_OK) continue;
    // Z_BUF_ERROR: no progress without more input (the output buffer is fresh on every call).
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      if (offset == in.size()) return corrupt(c, "truncated");
      continue;
    }
    header_error = !produced && rc == Z_DATA_ERROR && offset <= kChunk;
    return corrupt(c, zs.msg ? zs.msg : "inflate failed");
  }
}

DecodeOutcome zlib_decode(std::string_view in, Coding c, size_t max_bytes, std::string& out) {
  bool header_error = false;
  if (c == Coding::kGzip) return zlib_pass(in, c, 15 + 16, max_bytes, out, header_error);
  DecodeOutcome r = zlib_pass(in, c, 15, max_bytes, out, header_error);
  if (r.status == 0 || !header_error) return r;
  out.clear();
  bool ignored = false;
  DecodeOutcome raw = zlib_pass(in, c, -15, max_bytes, out, ignored);
  return raw.status == 0 ? raw : r;
}

DecodeOutcome brotli_decode(std::string_view in, size_t max_bytes, std::string& out) {
  std::unique_ptr<BrotliDecoderState, void (*)(BrotliDecoderState*)> state(
      BrotliDecoderCreateInstance(nullptr, nullptr, nullptr), BrotliDecoderDestroyInstance);
  if (!state) return {500, "cannot initialise brotli"};
  auto buffer = std::make_unique<uint8_t[]>(kChunk);
  size_t offset = 0;
  size_t avail_in = 0;
  const uint8_t* next_in = nullptr;
  while (true) {
    if (avail_in == 0 && offset < in.size()) {
      size_t n = std::min(kChunk, in.size() - offset);
      next_in = reinterpret_cast<const uint8_t*>(in.data() + offset);
      avail_in = n;
      offset += n;
    }
    size_t avail_out = kChunk;
    uint8_t* next_out = buffer.get();
    BrotliDecoderResult rc =
        BrotliDecoderDecompressStream(state.get(), &avail_in, &next_in, &avail_out, &next_out, nullptr);
    size_t got = kChunk - avail_out;
    if (got > 0) {
      out.append(reinterpret_cast<const char*>(buffer.get()), got);
      if (out.size() > max_bytes) return too_large(Coding::kBrotli, max_bytes);
    }
    switch (rc) {
      case BROTLI_DECODER_RESULT_SUCCESS:
        if (avail_in > 0 || offset < in.size())
          return corrupt(Coding::kBrotli, "data after the end of the stream");
        return {};
      case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
        if (avail_in == 0 && offset == in.size()) return corrupt(Coding::kBrotli, "truncated");
        break;
      case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
        break;
      case BROTLI_DECODER_RESULT_ERROR:
      default:
        return corrupt(Coding::kBrotli, BrotliDecoderErrorString(BrotliDecoderGetErrorCode(state.get())));
    }
  }
}

}  // namespace

DecodeOutcome decode_request_body(Request& request, size_t max_bytes, bool enabled) {
  if (!request.headers.has("Content-Encoding")) return {};
  // Several fields form one list in order (RFC 9110 5.3); the last coding applied is undone first.
  std::vector<Coding> codings;
  for (const auto& [name, value] : request.headers.fields()) {
    if (!iequals(name, "Content-Encoding")) continue;
    std::string_view rest = value;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view token = trim_ows(rest.substr(0, comma));
      if (!token.empty() && !iequals(token, "identity")) {
        if (!enabled) {
          return {415, "Content-Encoding '" + std::string(token) +
                           "' is not accepted (request decompression is disabled)"};
        }
        if (iequals(token, "gzip") || iequals(token, "x-gzip")) {
          codings.push_back(Coding::kGzip);
        } else if (iequals(token, "deflate")) {
          codings.push_back(Coding::kDeflate);
        } else if (iequals(token, "br")) {
          codings.push_back(Coding::kBrotli);
        } else {
          return {415,
                  "unsupported Content-Encoding '" + std::string(token) + "' (supported: gzip, deflate, br)"};
        }
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  // An empty body has nothing to undo, whatever it claims.
  if (!request.body.empty()) {
    for (auto it = codings.rbegin(); it != codings.rend(); ++it) {
      std::string out;
      DecodeOutcome r = *it == Coding::kBrotli ? brotli_decode(request.body, max_bytes, out)
                                               : zlib_decode(request.body, *it, max_bytes, out);
      if (r.status != 0) return r;
      request.body = std::move(out);
    }
  }
  request.headers.remove("Content-Encoding");
  if (request.headers.has("Content-Length"))
    request.headers.set("Content-Length", std::to_string(request.body.size()));
  return {};
}

}  // namespace m3::http
