// The asynchronous HTTP client on its own: whole responses by Content-Length, chunked and close-delimited
// framing, keep-alive reuse, body bytes handed over as they arrive, and the requests it must refuse or give
// up on (https, a malformed URL, a server that says nothing past the inactivity timeout) with a clear error.
#include <gtest/gtest.h>

#include "bench/http_client.h"
#include "sse_test_server.h"

namespace m3::bench {
namespace {

TEST(BenchHttpClient, ReadsEveryFramingAndReusesConnections) {
  SseTestServer server([](const TestRequest& req) {
    if (req.target == "/chunked") return TestReply{200, {"ab", "cd"}};
    if (req.target == "/unframed") return TestReply{200, {"ab", "cd"}, true, false};
    return TestReply{418, {req.method + " " + req.body}};
  });
  HttpClient http;
  const HttpResult chunked = http.fetch({"GET", server.url() + "/chunked", {}, ""});
  ASSERT_EQ(chunked.error, "");
  EXPECT_EQ(chunked.head.status, 200);
  EXPECT_EQ(chunked.body, "abcd");
  const HttpResult sized = http.fetch({"POST", server.url() + "/sized", {{"X-A", "1"}}, "hello"});
  ASSERT_EQ(sized.error, "");
  EXPECT_EQ(sized.head.status, 418);
  EXPECT_EQ(sized.body, "POST hello");
  EXPECT_EQ(server.connections(), 1u);  // the second request reused the kept-alive connection

  const HttpResult unframed = http.fetch({"GET", server.url() + "/unframed", {}, ""});
  ASSERT_EQ(unframed.error, "");
  EXPECT_EQ(unframed.body, "abcd");
  EXPECT_EQ(http.fetch({"GET", server.url() + "/chunked", {}, ""}).body, "abcd");
  EXPECT_EQ(server.connections(), 2u);  // a connection whose close ended the body is not reused
}

TEST(BenchHttpClient, BodyBytesArriveWhileTheResponseIsStillOpen) {
  SseTestServer server([](const TestRequest&) {
    TestReply r{200, {"data: 1\n\n"}};
    r.stall = true;  // the response never ends: only the inactivity timeout ends the request
    return r;
  });
  HttpClientOptions options;
  options.inactivity_timeout = std::chrono::milliseconds(300);
  HttpClient http(options);
  const HttpResult r = http.fetch({"GET", server.url() + "/", {}, ""});
  EXPECT_EQ(r.body, "data: 1\n\n");
  EXPECT_NE(r.error.find("inactivity timeout"), std::string::npos) << r.error;
}

TEST(BenchHttpClient, RefusesHttpsAndMalformedUrls) {
  HttpClient http;
  const HttpResult https = http.fetch({"GET", "https://127.0.0.1:1/v1/models", {}, ""});
  EXPECT_NE(https.error.find("https is not supported"), std::string::npos) << https.error;
  for (const char* url : {"127.0.0.1:8000/v1", "http://:80/", "http://host:port/", "http://[::1/"}) {
    const HttpResult bad = http.fetch({"GET", url, {}, ""});
    EXPECT_NE(bad.error.find("URL"), std::string::npos) << url << ": " << bad.error;
  }
}

TEST(BenchHttpClient, ASilentServerFailsTheRequestAfterTheInactivityTimeout) {
  SseTestServer server(
      [](const TestRequest&) {
        return TestReply{200, {"data: [DONE]\n\n"}};
      },
      /*hold_until_open=*/2);  // one request never reaches 2: the server stays silent
  HttpClientOptions options;
  options.inactivity_timeout = std::chrono::milliseconds(200);
  HttpClient http(options);
  const HttpResult r = http.fetch({"GET", server.url() + "/", {}, ""});
  EXPECT_NE(r.error.find("inactivity timeout"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("200 ms"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace m3::bench
