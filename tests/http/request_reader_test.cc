// The socket-free RequestReader: byte-at-a-time feeding, pipelined boundaries, and every framing and limit
// rule with the status it maps to (the same rules are checked again over a real socket in
// server_framing_test.cc).
#include <gtest/gtest.h>

#include "http/request_reader.h"

namespace m3::http {
namespace {

ServerLimits limits() {
  ServerLimits l;
  l.max_body_bytes = 100;
  l.max_header_bytes = 512;
  l.max_headers = 8;
  l.max_target_bytes = 64;
  return l;
}

struct Outcome {
  RequestReader::State state;
  int status;
  std::string message;
  size_t used;
};

Outcome read_all(const ServerLimits& l, const std::string& bytes) {
  RequestReader reader(l);
  size_t used = reader.feed(bytes);
  return {reader.state(), reader.error_status(), reader.error_message(), used};
}

TEST(HttpRequestReader, ParsesAGetByteByByte) {
  ServerLimits l = limits();
  RequestReader reader(l);
  std::string bytes = "GET /v1/models?x=1&y=a+b HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n";
  // Like the connection: unconsumed bytes stay buffered and are fed again with the next ones.
  std::string buffered;
  for (size_t i = 0; i < bytes.size(); ++i) {
    buffered.push_back(bytes[i]);
    buffered.erase(0, reader.feed(buffered));
    if (i + 1 < bytes.size()) {
      ASSERT_EQ(reader.state(), RequestReader::State::kHead) << "at byte " << i;
    }
  }
  ASSERT_EQ(reader.state(), RequestReader::State::kDone);
  EXPECT_TRUE(buffered.empty());
  Request r = reader.take_request();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/v1/models?x=1&y=a+b");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1&y=a+b");
  EXPECT_EQ(r.query_param("y"), "a b");
  EXPECT_EQ(r.version, 11);
  ASSERT_EQ(r.headers.size(), 2u);
  EXPECT_EQ(r.headers.fields()[1].first, "X-A");
}

TEST(HttpRequestReader, TakesTheUnconsumedBytesAgainWithMoreAppended) {
  // The caller keeps unconsumed bytes; feeding them again with more appended must work (the session does so).
  ServerLimits l = limits();
  RequestReader reader(l);
  std::string buffered;
  std::string bytes = "POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
  for (char c : bytes) {
    buffered.push_back(c);
    buffered.erase(0, reader.feed(buffered));
  }
  ASSERT_EQ(reader.state(), RequestReader::State::kDone);
  EXPECT_EQ(reader.take_request().body, "hello");
  EXPECT_TRUE(buffered.empty());
}

TEST(HttpRequestReader, StopsAtTheEndOfEachPipelinedRequest) {
  ServerLimits l = limits();
  RequestReader reader(l);
  std::string a = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
  std::string b = "GET /b HTTP/1.1\r\n\r\n";
  std::string both = a + b;
  size_t used = reader.feed(both);
  EXPECT_EQ(used, a.size());
  ASSERT_EQ(reader.state(), RequestReader::State::kDone);
  EXPECT_EQ(reader.take_request().path, "/a");
  reader.reset();
  EXPECT_EQ(reader.feed(std::string_view(both).substr(used)), b.size());
  ASSERT_EQ(reader.state(), RequestReader::State::kDone);
  EXPECT_EQ(reader.take_request().path, "/b");
}

TEST(HttpRequestReader, DecodesChunkedBodiesAndIgnoresTrailers) {
  auto r =
      read_all(limits(),
               "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\n"
               "X-Trailer: t\r\n\r\n");
  EXPECT_EQ(r.state, RequestReader::State::kDone);
}

TEST(HttpRequestReader, SkipsLeadingEmptyLines) {
  auto r = read_all(limits(), "\r\n\r\nGET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.state, RequestReader::State::kDone);
}

TEST(HttpRequestReader, ReportsTheBodyPhaseAndExpectContinue) {
  ServerLimits l = limits();
  RequestReader reader(l);
  reader.feed("POST / HTTP/1.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\nabc");
  EXPECT_EQ(reader.state(), RequestReader::State::kBody);
  EXPECT_TRUE(reader.expects_continue());
}

struct Refusal {
  const char* name;
  std::string bytes;
  int status;
  const char* message;  // a substring of the message
};

TEST(HttpRequestReader, RefusesBadFramingAndOversizedRequests) {
  std::string long_target(100, 'a');
  std::string huge_target(2000, 'a');  // longer than the whole head budget: still 414, not 431
  std::string many_fields;
  for (int i = 0; i < 9; ++i) many_fields += "X-" + std::to_string(i) + ": v\r\n";
  const Refusal cases[] = {
      {"negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length"},
      {"non-numeric length", "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "invalid Content-Length"},
      {"overflowing length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400,
       "invalid Content-Length"},
      {"empty length", "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400, "Content-Length"},
      {"conflicting lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
       "conflicting Content-Length"},
      {"duplicate length", "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", 400,
       "duplicate Content-Length"},
      {"listed length", "POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\nab", 400, "invalid Content-Length"},
      {"length then chunked", "POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
       400, "both Content-Length and Transfer-Encoding"},
      {"chunked then length", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
       400, "both Content-Length and Transfer-Encoding"},
      {"unknown coding then length",
       "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n", 400, "Transfer-Encoding"},
      {"unknown transfer coding", "POST / HTTP/1.1\r\nTransfer-Encoding: foo\r\n\r\n", 400,
       "unsupported Transfer-Encoding"},
      {"chunked not last", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400,
       "unsupported Transfer-Encoding"},
      {"coding before chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
       "unsupported Transfer-Encoding"},
      {"two chunked fields",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
       "duplicate Transfer-Encoding"},
      {"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", 400,
       "malformed chunked body"},
      {"chunk without CRLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n", 400,
       "malformed chunked body"},
      {"target too long", "GET /" + long_target + " HTTP/1.1\r\n\r\n", 414, "request target longer than 64"},
      {"target past the head limit", "GET /" + huge_target, 414, "request target longer than 64"},
      {"too many fields", "GET / HTTP/1.1\r\n" + many_fields + "\r\n", 431, "at most 8 fields, 512 bytes"},
      {"head too large", "GET / HTTP/1.1\r\nX-Big: " + std::string(600, 'b') + "\r\n\r\n", 431,
       "request headers too large"},
      {"length over the body limit", "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413,
       "request body exceeds 100 bytes"},
      {"chunks over the body limit",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'x') + "\r\n40\r\n",
       413, "request body exceeds 100 bytes"},
      {"garbage request line", "HELLO\r\n\r\n", 400, "malformed request line"},
      {"bad version", "GET / HTTP/2.0\r\n\r\n", 400, "malformed request line"},
      {"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, "malformed request header field"},
  };
  for (const auto& c : cases) {
    auto r = read_all(limits(), c.bytes);
    EXPECT_EQ(r.state, RequestReader::State::kError) << c.name;
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.message;
    EXPECT_NE(r.message.find(c.message), std::string::npos) << c.name << ": " << r.message;
  }
}

TEST(HttpRequestReader, KeepsTheRequestLineForTheErrorRenderer) {
  ServerLimits l = limits();
  RequestReader reader(l);
  std::string many_fields;
  for (int i = 0; i < 9; ++i) many_fields += "X-" + std::to_string(i) + ": v\r\n";
  reader.feed("POST /v1/messages?beta=true HTTP/1.1\r\n" + many_fields + "\r\n");
  ASSERT_EQ(reader.state(), RequestReader::State::kError);
  EXPECT_EQ(reader.request().method, "POST");
  EXPECT_EQ(reader.request().path, "/v1/messages");
}

TEST(HttpRequestReader, AbsoluteFormTargetsRouteByPath) {
  ServerLimits l = limits();
  RequestReader reader(l);
  reader.feed("GET http://example.com/v1/models?a=1 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(reader.state(), RequestReader::State::kDone);
  Request r = reader.take_request();
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "a=1");
}

TEST(HttpRequestReader, AHeadOfExactlyTheLimitIsAccepted) {
  ServerLimits l = limits();
  std::string line = "GET / HTTP/1.1\r\n";
  std::string field = "X-Pad: ";
  // request line + field + CRLF + final CRLF == max_header_bytes
  size_t pad = l.max_header_bytes - line.size() - field.size() - 2 - 2;
  auto ok = read_all(l, line + field + std::string(pad, 'p') + "\r\n\r\n");
  EXPECT_EQ(ok.state, RequestReader::State::kDone) << ok.message;
  auto over = read_all(l, line + field + std::string(pad + 1, 'p') + "\r\n\r\n");
  EXPECT_EQ(over.status, 431);
}

}  // namespace
}  // namespace m3::http
