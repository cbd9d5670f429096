// decode_request_body on its own: each coding, chains in reverse order, the limit applied to the inflated
// size (stopping early on a bomb), corrupt data (400 naming the coding), unknown or disabled codings (415).
#include <gtest/gtest.h>

#include "http/decompress.h"
#include "test_codecs.h"

namespace m3::http {
namespace {

using test::brotli;
using test::gzip;
using test::zlib_compress;

Request with_body(std::string body, const std::string& encoding) {
  Request r;
  r.method = "POST";
  r.headers.add("Content-Encoding", encoding);
  r.headers.add("Content-Length", std::to_string(body.size()));
  r.body = std::move(body);
  return r;
}

std::string sample() {
  std::string s;
  for (int i = 0; i < 2000; ++i) s += "{\"role\":\"user\",\"content\":\"message " + std::to_string(i) + "\"}";
  return s;
}

TEST(HttpDecompress, DecodesEachCodingAndFixesTheHeaders) {
  const std::string text = sample();
  const std::pair<std::string, std::string> cases[] = {
      {"gzip", gzip(text)},
      {"x-gzip", gzip(text)},
      {"deflate", zlib_compress(text, 15)},
      {"deflate", zlib_compress(text, -15)},  // raw deflate, as some clients send it
      {"br", brotli(text)},
      {"identity", text},
      {"GZIP", gzip(text)},
  };
  for (const auto& [coding, body] : cases) {
    Request r = with_body(body, coding);
    DecodeOutcome d = decode_request_body(r, 1 << 20, true);
    ASSERT_EQ(d.status, 0) << coding << ": " << d.message;
    EXPECT_EQ(r.body, text) << coding;
    EXPECT_FALSE(r.headers.has("Content-Encoding")) << coding;
    EXPECT_EQ(r.headers.get("Content-Length"), std::to_string(text.size())) << coding;
  }
}

TEST(HttpDecompress, UndoesAChainLastCodingFirst) {
  const std::string text = sample();
  Request r = with_body(brotli(gzip(text)), "gzip, br");  // gzip applied first, then br
  ASSERT_EQ(decode_request_body(r, 1 << 20, true).status, 0);
  EXPECT_EQ(r.body, text);
  Request two_fields;
  two_fields.headers.add("Content-Encoding", "deflate");
  two_fields.headers.add("Content-Encoding", "gzip");
  two_fields.body = gzip(zlib_compress(text, 15));
  ASSERT_EQ(decode_request_body(two_fields, 1 << 20, true).status, 0);
  EXPECT_EQ(two_fields.body, text);
}

TEST(HttpDecompress, AcceptsConcatenatedGzipMembers) {
  Request r = with_body(gzip("hello ") + gzip("world"), "gzip");
  ASSERT_EQ(decode_request_body(r, 1 << 20, true).status, 0);
  EXPECT_EQ(r.body, "hello world");
}

TEST(HttpDecompress, StopsABombAtTheLimit) {
  const size_t limit = 1 << 20;
  Request r = with_body(test::gzip_zeros(size_t{64} << 20), "gzip");
  DecodeOutcome d = decode_request_body(r, limit, true);
  EXPECT_EQ(d.status, 413);
  EXPECT_NE(d.message.find("request body exceeds 1048576 bytes"), std::string::npos) << d.message;
  Request b = with_body(brotli(std::string(size_t{8} << 20, 'z')), "br");
  EXPECT_EQ(decode_request_body(b, limit, true).status, 413);
}

TEST(HttpDecompress, ABodyOfExactlyTheLimitPasses) {
  const size_t limit = 1 << 20;
  Request r = with_body(gzip(std::string(limit, 'a')), "gzip");
  EXPECT_EQ(decode_request_body(r, limit, true).status, 0);
  EXPECT_EQ(r.body.size(), limit);
}

TEST(HttpDecompress, CorruptDataIs400NamingTheCoding) {
  std::string truncated = gzip(sample());
  truncated.resize(truncated.size() / 2);
  const std::pair<std::string, std::string> cases[] = {
      {"gzip", "this is not gzip at all"},
      {"gzip", truncated},
      {"deflate", "\xff\xfe garbage"},
      {"br", "\xff\xff\xff\xff not brotli"},
  };
  for (const auto& [coding, body] : cases) {
    Request r = with_body(body, coding);
    DecodeOutcome d = decode_request_body(r, 1 << 20, true);
    EXPECT_EQ(d.status, 400) << coding;
    EXPECT_NE(d.message.find(coding), std::string::npos) << d.message;
  }
}

TEST(HttpDecompress, UnknownOrDisabledCodingsAre415) {
  Request unknown = with_body("abc", "compress");
  DecodeOutcome d = decode_request_body(unknown, 1 << 20, true);
  EXPECT_EQ(d.status, 415);
  EXPECT_NE(d.message.find("compress"), std::string::npos);
  Request disabled = with_body(gzip("abc"), "gzip");
  EXPECT_EQ(decode_request_body(disabled, 1 << 20, false).status, 415);
  Request identity = with_body("abc", "identity");
  EXPECT_EQ(decode_request_body(identity, 1 << 20, false).status, 0);
  EXPECT_EQ(identity.body, "abc");
}

}  // namespace
}  // namespace m3::http
