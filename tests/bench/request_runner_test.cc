// The event-driven load generator: one process drives 4,096 streaming requests that are all open on the
// server at the same moment, --max-concurrency bounds what is in flight (and reuses connections), and a
// stream cut mid-way, an HTTP 500 and a refused connection each fail only their own request, with a clear
// message.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench/request_runner.h"
#include "sse_test_server.h"

namespace m3::bench {
namespace {

using nlohmann::json;

// A completions stream answering the request's max_tokens with as many one-token chunks, then usage and
// [DONE]; the prompts "cut" and "fail" get a stream dropped mid-way and an HTTP 500.
TestReply completion_stream(const TestRequest& req) {
  const json body = json::parse(req.body, nullptr, false);
  const std::string prompt = body.value("prompt", "");
  const std::string token = "data: {\"choices\":[{\"index\":0,\"text\":\"t\",\"finish_reason\":null}]}\n\n";
  if (prompt == "cut") return {200, {token}, false};
  if (prompt == "fail")
    return {500, {R"({"error":{"message":"engine exploded","type":"InternalServerError"}})"}};
  const int n = body.value("max_tokens", 0);
  TestReply r{200, std::vector<std::string>(size_t(n), token)};
  r.chunks.push_back("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(prompt.size()) +
                     ",\"completion_tokens\":" + std::to_string(n) + "}}\n\n");
  r.chunks.push_back("data: [DONE]\n\n");
  return r;
}

Endpoint endpoint(const std::string& base_url) {
  Endpoint ep;
  ep.base_url = base_url;
  ep.path = "/v1/completions";
  ep.model = "m";
  return ep;
}

// Runs `requests` through a RequestRunner and returns their results in order.
std::vector<RequestOutput> run(const Endpoint& ep, const std::vector<SampleRequest>& requests,
                               size_t max_in_flight) {
  std::vector<RequestOutput> outputs(requests.size());
  HttpClient http;
  const RequestClient client(ep, std::chrono::steady_clock::now(), http);
  RequestRunner runner(client, max_in_flight,
                       [&](size_t i, RequestOutput&& o) { outputs[i] = std::move(o); });
  for (size_t i = 0; i < requests.size(); ++i)
    runner.submit(i, requests[i], "bench-" + std::to_string(i), 0.0);
  runner.wait();
  return outputs;
}

constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

TEST(BenchRequestRunner, DrivesFourThousandConcurrentStreamsFromOneProcess) {
  constexpr size_t kStreams = 4096;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_max < 2 * kStreams + 64)
    GTEST_SKIP() << "the open-file limit (" << lim.rlim_max << ") is too low for both ends of 4,096 sockets";
  SseTestServer server(completion_stream, /*hold_until_open=*/kStreams);
  std::vector<SampleRequest> requests;
  for (size_t i = 0; i < kStreams; ++i) requests.push_back({"p" + std::to_string(i), 1, int(1 + i % 4)});

  const std::vector<RequestOutput> outputs = run(endpoint(server.url()), requests, kUnbounded);
  EXPECT_EQ(server.peak_open(), kStreams);  // every stream was open on the server at the same moment
  size_t failed = 0, wrong = 0;
  for (size_t i = 0; i < kStreams; ++i) {
    const RequestOutput& o = outputs[i];
    const int tokens = requests[i].expected_output_len;
    if (!o.success && ++failed <= 3) ADD_FAILURE() << "request " << i << ": " << o.error;
    if (o.success && (o.output_tokens != tokens || o.generated_text != std::string(size_t(tokens), 't') ||
                      o.itl.size() != size_t(tokens - 1) || o.prompt_len != int(requests[i].prompt.size())))
      ++wrong;
  }
  EXPECT_EQ(failed, 0u);
  EXPECT_EQ(wrong, 0u);
}

TEST(BenchRequestRunner, MaxConcurrencyBoundsTheRequestsInFlight) {
  SseTestServer server(completion_stream, /*hold_until_open=*/3);
  const std::vector<SampleRequest> requests(30, SampleRequest{"hello", 1, 2});
  const std::vector<RequestOutput> outputs = run(endpoint(server.url()), requests, 3);
  EXPECT_EQ(server.peak_open(), 3u);    // reached (the server holds replies until 3 are open), never passed
  EXPECT_LE(server.connections(), 3u);  // a finished request's connection serves the next one
  double first_end = std::numeric_limits<double>::max();
  for (size_t i = 0; i < 3; ++i) first_end = std::min(first_end, outputs[i].start_time + outputs[i].latency);
  for (size_t i = 0; i < outputs.size(); ++i) {
    ASSERT_TRUE(outputs[i].success) << i << ": " << outputs[i].error;
    EXPECT_EQ(outputs[i].output_tokens, 2);
    EXPECT_GE(outputs[i].client_queue_time, 0.0);
    if (i >= 3) {
      EXPECT_GE(outputs[i].start_time, first_end) << i;  // it waited for a slot
    }
  }
}

TEST(BenchRequestRunner, EachFailureStaysWithItsRequestAndSaysWhy) {
  SseTestServer server(completion_stream);
  const std::vector<SampleRequest> requests = {{"ok", 1, 2}, {"cut", 1, 2}, {"fail", 1, 2}, {"ok", 1, 3}};
  const std::vector<RequestOutput> o = run(endpoint(server.url()), requests, kUnbounded);
  EXPECT_TRUE(o[0].success) << o[0].error;
  EXPECT_TRUE(o[3].success) << o[3].error;
  EXPECT_EQ(o[3].output_tokens, 3);
  EXPECT_FALSE(o[1].success);
  EXPECT_NE(o[1].error.find("closed the connection before the response was complete"), std::string::npos)
      << o[1].error;
  EXPECT_FALSE(o[2].success);
  EXPECT_NE(o[2].error.find("HTTP 500"), std::string::npos) << o[2].error;
  EXPECT_NE(o[2].error.find("engine exploded"), std::string::npos) << o[2].error;

  const std::vector<RequestOutput> refused = run(endpoint("http://127.0.0.1:1"), {{"ok", 1, 2}}, kUnbounded);
  EXPECT_FALSE(refused[0].success);
  EXPECT_NE(refused[0].error.find("cannot connect to http://127.0.0.1:1/v1/completions"), std::string::npos)
      << refused[0].error;
  EXPECT_NE(refused[0].error.find("refused"), std::string::npos) << refused[0].error;
}

}  // namespace
}  // namespace m3::bench
