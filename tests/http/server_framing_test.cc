// A real Server on a loopback port, driven with exact bytes: valid requests, every framing and limit refusal
// (status, message, Connection: close, and the server actually closing), request decompression end to end,
// and a gzip bomb that must be refused without the process inflating it.
#include <gtest/gtest.h>

#include "test_client.h"
#include "test_codecs.h"

namespace m3::http {
namespace {

using test::RawClient;
using test::TestServer;

// Sends `bytes`, expects one response with `status` whose message mentions `message`, Connection: close, and
// the server closing the connection promptly (a hang fails within the client's deadline).
void expect_refusal(int port, const std::string& bytes, int status, const std::string& message,
                    const std::string& what) {
  RawClient c(port);
  ASSERT_TRUE(c.connected()) << what;
  ASSERT_TRUE(c.send(bytes)) << what;
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value()) << what << ": no response";
  EXPECT_EQ(r->status, status) << what << ": " << r->body;
  EXPECT_NE(r->body.find(message), std::string::npos) << what << ": " << r->body;
  EXPECT_EQ(r->header("Connection"), "close") << what;
  EXPECT_TRUE(c.wait_closed(5)) << what << ": the server kept the connection open";
}

class HttpFraming : public ::testing::Test {
 protected:
  TestServer server_{test::small_limits(), test::echo_handler()};
};

TEST_F(HttpFraming, AnswersAValidGet) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("GET /v1/models?limit=2&q=a+b HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r->header("X-Method"), "GET");
  EXPECT_EQ(r->header("X-Path"), "/v1/models");
  EXPECT_EQ(r->header("X-Query"), "limit=2&q=a+b");
  EXPECT_EQ(r->header("X-Version"), "11");
  EXPECT_EQ(r->header("X-Remote"), "127.0.0.1");
  EXPECT_EQ(r->header("Server"), "m3serve");
  EXPECT_TRUE(r->has_header("Date"));
  EXPECT_EQ(r->header("Content-Length"), "0");
  EXPECT_FALSE(r->has_header("Connection"));
}

TEST_F(HttpFraming, AnswersPostsWithLengthAndChunkedBodies) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "hello world");
  ASSERT_TRUE(c.send(
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello world");
}

TEST_F(HttpFraming, RefusesInvalidContentLengths) {
  int port = server_.port();
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\nhello", 400, "invalid Content-Length",
                 "negative");
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: five\r\n\r\nhello", 400, "invalid Content-Length",
                 "non-numeric");
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\nhello", 400,
                 "invalid Content-Length", "overflowing");
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400,
                 "conflicting Content-Length", "two values");
  // RFC 9110 8.6 allows collapsing equal duplicates; we refuse them (no framing ambiguity left for a proxy).
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400,
                 "duplicate Content-Length", "same value twice");
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello", 400, "invalid Content-Length",
                 "a list");
}

TEST_F(HttpFraming, RefusesBadTransferEncodings) {
  int port = server_.port();
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                 400, "both Content-Length and Transfer-Encoding", "length + chunked");
  expect_refusal(port, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
                 400, "both Content-Length and Transfer-Encoding", "chunked + length");
  expect_refusal(port, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\nhello\r\n0\r\n\r\n", 400,
                 "malformed chunked body", "bad chunk size");
  expect_refusal(port, "POST / HTTP/1.1\r\nTransfer-Encoding: foo\r\n\r\n", 400,
                 "unsupported Transfer-Encoding", "unknown coding");
  expect_refusal(port, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501,
                 "unsupported Transfer-Encoding", "unimplemented coding before chunked");
  expect_refusal(port, "GARBAGE\r\n\r\n", 400, "malformed request line", "bad request line");
}

TEST_F(HttpFraming, RefusesLongTargetsAndLargeHeads) {
  int port = server_.port();
  std::string target(2000, 'a');  // limits: target 1024, head 4096
  expect_refusal(port, "GET /" + target + " HTTP/1.1\r\n\r\n", 414, "request target longer than 1024 bytes",
                 "long target");
  std::string huge(10000, 'a');  // runs past the whole head budget before its line ends
  expect_refusal(port, "GET /" + huge + " HTTP/1.1\r\n\r\n", 414, "request target longer than 1024 bytes",
                 "target past the head limit");
  std::string fields;
  for (int i = 0; i < 17; ++i) fields += "X-F" + std::to_string(i) + ": v\r\n";
  expect_refusal(port, "GET /many HTTP/1.1\r\n" + fields + "\r\n", 431,
                 "request headers too large (at most 16 fields, 4096 bytes)", "field count");
  expect_refusal(port, "GET /big HTTP/1.1\r\nX-Big: " + std::string(5000, 'b') + "\r\n\r\n", 431,
                 "request headers too large", "head size");
}

TEST_F(HttpFraming, PassesThePartialRequestToTheRenderer) {
  RawClient c(server_.port());
  std::string fields;
  for (int i = 0; i < 17; ++i) fields += "X-F" + std::to_string(i) + ": v\r\n";
  ASSERT_TRUE(c.send("POST /v1/messages HTTP/1.1\r\n" + fields + "\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(r->body.find("\"method\":\"POST\",\"path\":\"/v1/messages\""), std::string::npos) << r->body;
}

TEST_F(HttpFraming, RefusesABigContentLengthBeforeTheBodyIsSent) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("POST /upload HTTP/1.1\r\nContent-Length: 10485760\r\n\r\n"));  // and no body at all
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("request body exceeds 1048576 bytes"), std::string::npos) << r->body;
  EXPECT_EQ(r->header("Connection"), "close");
  EXPECT_TRUE(c.wait_closed(5));
}

TEST_F(HttpFraming, RefusesAChunkedBodyThatCrossesTheLimit) {
  RawClient c(server_.port());
  ASSERT_TRUE(c.send("POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::string piece(64 << 10, 'x');
  std::optional<test::ParsedResponse> r;
  // 17 x 64 KiB crosses the 1 MiB limit; the refusal may arrive while we are still sending.
  for (int i = 0; i < 32 && !c.readable_within(0); ++i) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    if (!c.send(size + piece + "\r\n")) break;
  }
  r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(c.wait_closed(5));
}

TEST_F(HttpFraming, DecodesCompressedBodies) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += "line " + std::to_string(i) + "\n";
  const std::pair<std::string, std::string> cases[] = {
      {"gzip", test::gzip(text)},
      {"deflate", test::zlib_compress(text, 15)},
      {"deflate", test::zlib_compress(text, -15)},
      {"br", test::brotli(text)},
      {"gzip, br", test::brotli(test::gzip(text))},
  };
  RawClient c(server_.port());
  for (const auto& [coding, body] : cases) {
    ASSERT_TRUE(c.send("POST /e HTTP/1.1\r\nContent-Encoding: " + coding +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    auto r = c.read_response();
    ASSERT_TRUE(r.has_value()) << coding;
    EXPECT_EQ(r->status, 200) << coding << ": " << r->body;
    EXPECT_EQ(r->body, text) << coding;
    EXPECT_EQ(r->header("X-Content-Encoding"), "") << coding;  // removed before the handler
    EXPECT_EQ(r->header("X-Content-Length"), std::to_string(text.size())) << coding;
  }
}

TEST_F(HttpFraming, RefusesCorruptAndUnknownEncodings) {
  int port = server_.port();
  std::string bad = "definitely not gzip";
  expect_refusal(port,
                 "POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " +
                     std::to_string(bad.size()) + "\r\n\r\n" + bad,
                 400, "gzip", "corrupt gzip");
  expect_refusal(port, "POST / HTTP/1.1\r\nContent-Encoding: zstd\r\nContent-Length: 3\r\n\r\nabc", 415,
                 "unsupported Content-Encoding 'zstd'", "unknown coding");
}

TEST(HttpDecompression, DisabledDecompressionRefusesEncodedBodies) {
  ServerLimits limits = test::small_limits();
  limits.decompress = false;
  TestServer server(limits, test::echo_handler());
  std::string body = test::gzip("hello");
  expect_refusal(server.port(),
                 "POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body,
                 415, "decompression is disabled", "decompress=false");
}

TEST(HttpDecompression, RefusesAGzipBombWithoutInflatingIt) {
  const size_t inflated = size_t{64} << 20;
  std::string bomb = test::gzip_zeros(inflated);  // ~64 KiB on the wire
  ServerLimits limits = test::small_limits();     // 1 MiB body limit
  TestServer server(limits, test::echo_handler());
  long hwm_before = test::vm_kib("VmHWM");
  ASSERT_GT(hwm_before, 0);
  RawClient c(server.port());
  ASSERT_TRUE(c.send("POST /bomb HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " +
                     std::to_string(bomb.size()) + "\r\n\r\n" + bomb));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("request body exceeds 1048576 bytes"), std::string::npos) << r->body;
  EXPECT_TRUE(c.wait_closed(5));
  long growth_kib = test::vm_kib("VmHWM") - hwm_before;
  // Inflating it fully would add 64 MiB; a bounded decoder adds about the 1 MiB limit plus buffers.
  EXPECT_LT(growth_kib, 16 * 1024) << "peak RSS grew by " << growth_kib << " KiB";
}

}  // namespace
}  // namespace m3::http
