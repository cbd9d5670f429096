// The streaming client: SSE framing split at every byte, completions and chat chunk shapes (role chunk,
// reasoning fields, usage-only final chunk), garbled and cut streams, the request payloads, and the HTTP side
// against an in-process server (error status, broken connection, missing [DONE], headers, keep-alive reuse).
#include <gtest/gtest.h>

#include <mutex>

#include "bench/request_client.h"
#include "sse_test_server.h"

namespace m3::bench {
namespace {

using nlohmann::json;

const std::string kCompletionsStream =
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"Hel\",\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"lo\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
    "\"total_tokens\":15}}\n\n"
    "data: [DONE]\n\n";

std::vector<std::string> read_all(const std::string& stream, size_t piece) {
  SseReader r;
  std::vector<std::string> events;
  for (size_t i = 0; i < stream.size(); i += piece)
    for (auto& e : r.feed(std::string_view(stream).substr(i, piece))) events.push_back(e);
  if (auto last = r.finish()) events.push_back(*last);
  return events;
}

TEST(BenchSseReader, SameEventsWhateverTheSplit) {
  const std::vector<std::string> whole = read_all(kCompletionsStream, kCompletionsStream.size());
  ASSERT_EQ(whole.size(), 5u);
  EXPECT_EQ(whole.back(), "[DONE]");
  EXPECT_EQ(json::parse(whole[3])["usage"]["completion_tokens"], 3);
  for (size_t piece = 1; piece < 40; ++piece) EXPECT_EQ(read_all(kCompletionsStream, piece), whole) << piece;
}

TEST(BenchSseReader, CrlfCommentsFieldsMultilineAndUnterminatedEvents) {
  const std::string s =
      ": keep-alive\r\n\r\nevent: message\r\nid: 7\r\ndata:{\"a\":1}\r\n\r\ndata: line1\ndata: line2\n\n"
      "retry: 10\n\ndata: [DONE]";
  EXPECT_EQ(read_all(s, s.size()), (std::vector<std::string>{"{\"a\":1}", "line1\nline2", "[DONE]"}));
  EXPECT_EQ(read_all(s, 3), read_all(s, s.size()));
  SseReader empty;
  EXPECT_TRUE(empty.feed("").empty());
  EXPECT_FALSE(empty.finish().has_value());
}

RequestOutput replay(ApiKind kind, const std::vector<std::string>& payloads,
                     const std::string& transport = "") {
  StreamTimeline t(kind, /*start_time=*/1.0, /*prompt_len=*/5);
  double now = 1.25;
  for (const std::string& p : payloads) {
    t.on_payload(p, now);
    now += 0.5;
  }
  return std::move(t).finish(transport);
}

TEST(BenchStreamTimeline, CompletionsChunksAndUsageOnlyFinalChunk) {
  const RequestOutput o = replay(ApiKind::kCompletions, read_all(kCompletionsStream, 64));
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.generated_text, "Hello");
  EXPECT_DOUBLE_EQ(o.start_time, 1.0);
  EXPECT_DOUBLE_EQ(o.ttft, 0.25);
  EXPECT_EQ(o.itl, (std::vector<double>{0.5, 0.5}));  // the empty-text chunk counts: it has choices
  EXPECT_DOUBLE_EQ(o.latency, 1.25);                  // the last chunk with choices, not the usage chunk
  EXPECT_EQ(o.output_tokens, 3);
  EXPECT_EQ(o.prompt_len, 12);  // usage.prompt_tokens replaces the dataset's count, as vLLM
}

TEST(BenchStreamTimeline, ChatRoleChunkReasoningAndContent) {
  const RequestOutput o =
      replay(ApiKind::kChat,
             {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})",
              R"({"choices":[{"index":0,"delta":{"reasoning_content":"hm","reasoning":"hm"}}]})",
              R"({"choices":[{"index":0,"delta":{"reasoning":"m."}}]})",
              R"({"choices":[{"index":0,"delta":{"content":"Paris"}}]})",
              R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null})",
              R"({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":4}})", "[DONE]"});
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_DOUBLE_EQ(o.ttft, 0.25);  // the role chunk is the first chunk with choices
  EXPECT_EQ(o.itl.size(), 4u);
  EXPECT_EQ(o.generated_text, "hmm.Paris");
  EXPECT_EQ(o.output_tokens, 4);
  EXPECT_EQ(o.prompt_len, 20);
}

TEST(BenchStreamTimeline, CachedPromptTokensFromUsageDetails) {
  const std::string chunk = R"({"choices":[{"text":"a"}]})";
  const RequestOutput cached =
      replay(ApiKind::kCompletions, {chunk,
                                     R"({"choices":[],"usage":{"prompt_tokens":300,"completion_tokens":1,)"
                                     R"("prompt_tokens_details":{"cached_tokens":256}}})",
                                     "[DONE]"});
  ASSERT_TRUE(cached.success) << cached.error;
  EXPECT_EQ(cached.cached_tokens, 256);
  EXPECT_EQ(cached.prompt_len, 300);
  const RequestOutput none =
      replay(ApiKind::kCompletions,
             {chunk, R"({"choices":[],"usage":{"prompt_tokens":3,"prompt_tokens_details":null}})", "[DONE]"});
  EXPECT_FALSE(none.cached_tokens.has_value());  // not reported: nothing to average
  EXPECT_EQ(none.cached_tokens.value_or(0), 0);
}

TEST(BenchStreamTimeline, WithoutUsageTheTokenCountIsLeftToTheTokenizer) {
  const RequestOutput o = replay(
      ApiKind::kCompletions, {R"({"choices":[{"text":"a"}]})", R"({"choices":[{"text":"b"}]})", "[DONE]"});
  ASSERT_TRUE(o.success);
  EXPECT_EQ(o.output_tokens, 0);
  EXPECT_EQ(o.prompt_len, 5);
}

TEST(BenchStreamTimeline, GarbledAndCutStreamsFail) {
  const std::string chunk = R"({"choices":[{"text":"a"}]})";
  const RequestOutput garbled = replay(ApiKind::kCompletions, {chunk, "{\"choices\": [{\"te", "[DONE]"});
  EXPECT_FALSE(garbled.success);
  EXPECT_NE(garbled.error.find("malformed stream chunk"), std::string::npos) << garbled.error;

  const RequestOutput error_event =
      replay(ApiKind::kCompletions,
             {chunk, R"({"error":{"message":"engine died","type":"InternalServerError"}})", "[DONE]"});
  EXPECT_FALSE(error_event.success);
  EXPECT_NE(error_event.error.find("engine died"), std::string::npos) << error_event.error;

  const RequestOutput no_done = replay(ApiKind::kCompletions, {chunk, chunk});
  EXPECT_FALSE(no_done.success);
  EXPECT_NE(no_done.error.find("[DONE]"), std::string::npos) << no_done.error;

  const RequestOutput usage_only =
      replay(ApiKind::kCompletions, {R"({"choices":[],"usage":{"completion_tokens":0}})", "[DONE]"});
  EXPECT_FALSE(usage_only.success);
  EXPECT_NE(usage_only.error.find("Never received a valid chunk"), std::string::npos) << usage_only.error;

  const RequestOutput broken = replay(ApiKind::kCompletions, {chunk}, "the connection broke");
  EXPECT_FALSE(broken.success);
  EXPECT_EQ(broken.error, "the connection broke");
}

TEST(BenchPayload, CompletionsAndChatShapes) {
  Endpoint ep;
  ep.model = "minimax-m3";
  ep.ignore_eos = true;
  ep.extra_body = {{"temperature", 0.0}, {"repetition_penalty", 1.1}};
  const SampleRequest req{"Hello there", 2, 17};
  const json c = build_payload(ep, req);
  EXPECT_EQ(c["model"], "minimax-m3");
  EXPECT_EQ(c["prompt"], "Hello there");
  EXPECT_EQ(c["max_tokens"], 17);
  EXPECT_EQ(c["stream"], true);
  EXPECT_EQ(c["stream_options"]["include_usage"], true);
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["ignore_eos"], true);
  EXPECT_EQ(c["temperature"], 0.0);
  EXPECT_EQ(c["repetition_penalty"], 1.1);  // --extra-body / sampling flags win

  ep.kind = ApiKind::kChat;
  ep.ignore_eos = false;
  const json chat = build_payload(ep, req);
  EXPECT_EQ(chat["messages"],
            json::parse(R"([{"role":"user","content":[{"type":"text","text":"Hello there"}]}])"));
  EXPECT_EQ(chat["max_completion_tokens"], 17);
  EXPECT_FALSE(chat.contains("max_tokens"));
  EXPECT_FALSE(chat.contains("prompt"));
  EXPECT_FALSE(chat.contains("ignore_eos"));
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
}

TEST(BenchPayload, ChatHistoryIsSentAsItsMessages) {
  Endpoint ep;
  ep.kind = ApiKind::kChat;
  const SampleRequest req{
      "sys hi ok more", 4, 3, {{"system", "sys"}, {"user", " hi"}, {"assistant", " ok"}, {"user", " more"}}};
  EXPECT_EQ(build_payload(ep, req)["messages"], json::parse(R"([
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": " hi"}]},
      {"role": "assistant", "content": " ok"},
      {"role": "user", "content": [{"type": "text", "text": " more"}]}])"));
  ep.kind = ApiKind::kCompletions;  // completions send the whole conversation as one prompt
  EXPECT_EQ(build_payload(ep, req)["prompt"], "sys hi ok more");
  EXPECT_FALSE(build_payload(ep, req).contains("messages"));
}

// The canned OpenAI-style endpoints of these tests, by path prefix.
class FakeServer {
 public:
  std::string url(const std::string& prefix) const { return server_.url() + prefix; }
  size_t connections() const { return server_.connections(); }

  std::mutex mu_;
  std::string auth_, request_id_;
  json body_;
  int flaky_calls_ = 0;

 private:
  TestReply reply(const TestRequest& req) {
    const std::string chunk = "data: {\"choices\":[{\"text\":\"x\"}]}\n\n";
    const std::string usage =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n";
    const std::string done = "data: [DONE]\n\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (req.target == "/ok/v1/completions") {
      auth_ = req.headers.count("authorization") ? req.headers.at("authorization") : "";
      request_id_ = req.headers.count("x-request-id") ? req.headers.at("x-request-id") : "";
      body_ = json::parse(req.body, nullptr, false);
      return {200, {chunk, chunk, usage, done}};
    }
    if (req.target == "/unframed/v1/completions") return {200, {chunk, chunk + usage, done}, true, false};
    if (req.target == "/broken/v1/completions") return {200, {chunk}, false};  // dropped mid-stream
    if (req.target == "/nodone/v1/completions") return {200, {chunk, usage}};
    if (req.target == "/flaky/v1/completions")
      return flaky_calls_++ % 2 == 0 ? TestReply{200, {chunk}, false} : TestReply{200, {chunk, usage, done}};
    if (req.target == "/status/v1/completions")
      return {503, {R"({"error":{"message":"server overloaded","type":"ServiceUnavailable"}})"}};
    return {404, {}};
  }

  SseTestServer server_{[this](const TestRequest& req) { return reply(req); }};  // last: stops first
};

RequestOutput send_to(const FakeServer& server, const std::string& prefix) {
  Endpoint ep;
  ep.base_url = server.url(prefix);
  ep.path = "/v1/completions";
  ep.model = "m";
  ep.headers = {{"Authorization", "Bearer secret"}};
  HttpClient http;
  const RequestClient client(ep, std::chrono::steady_clock::now(), http);
  return client.send({"hi", 1, 2}, "bench-1");
}

TEST(BenchRequestClient, StreamsOverHttp) {
  FakeServer server;
  const RequestOutput o = send_to(server, "/ok");
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.generated_text, "xx");
  EXPECT_EQ(o.output_tokens, 2);
  EXPECT_EQ(o.prompt_len, 9);
  EXPECT_EQ(o.itl.size(), 1u);
  EXPECT_GE(o.ttft, 0.0);
  EXPECT_GE(o.latency, o.ttft);
  std::lock_guard<std::mutex> lock(server.mu_);
  EXPECT_EQ(server.auth_, "Bearer secret");
  EXPECT_EQ(server.request_id_, "bench-1");
  ASSERT_FALSE(server.body_.is_discarded());
  EXPECT_EQ(server.body_["prompt"], "hi");
  EXPECT_EQ(server.body_["max_tokens"], 2);
}

TEST(BenchRequestClient, AFailedRequestDoesNotSpoilTheConnectionForTheNext) {
  FakeServer server;
  Endpoint ep;
  ep.base_url = server.url("/flaky");
  ep.path = "/v1/completions";
  HttpClient http;
  const RequestClient client(ep, std::chrono::steady_clock::now(), http);
  for (int i = 0; i < 6; ++i) {
    const RequestOutput o = client.send({"hi", 1, 2}, "");
    EXPECT_EQ(o.success, i % 2 == 1) << "request " << i << ": " << o.error;
  }
  EXPECT_EQ(server.connections(), 4u);  // a dropped stream's connection is not used again; a whole one's is
}

TEST(BenchRequestClient, AStreamEndedByClosingTheConnectionIsWhole) {
  FakeServer server;
  const RequestOutput o = send_to(server, "/unframed");
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.generated_text, "xx");
  EXPECT_EQ(o.output_tokens, 2);
}

TEST(BenchRequestClient, HttpErrorsBrokenStreamsAndNoServerAreFailures) {
  FakeServer server;
  const RequestOutput status = send_to(server, "/status");
  EXPECT_FALSE(status.success);
  EXPECT_NE(status.error.find("HTTP 503"), std::string::npos) << status.error;
  EXPECT_NE(status.error.find("server overloaded"), std::string::npos) << status.error;

  const RequestOutput broken = send_to(server, "/broken");
  EXPECT_FALSE(broken.success);
  EXPECT_NE(broken.error.find("closed the connection before the response was complete"), std::string::npos)
      << broken.error;

  const RequestOutput no_done = send_to(server, "/nodone");
  EXPECT_FALSE(no_done.success);
  EXPECT_NE(no_done.error.find("[DONE]"), std::string::npos) << no_done.error;

  const RequestOutput missing = send_to(server, "/missing");
  EXPECT_FALSE(missing.success);
  EXPECT_NE(missing.error.find("HTTP 404"), std::string::npos) << missing.error;

  Endpoint nowhere;
  nowhere.base_url = "http://127.0.0.1:1";
  nowhere.path = "/v1/completions";
  HttpClient http;
  const RequestClient client(nowhere, std::chrono::steady_clock::now(), http);
  const RequestOutput refused = client.send({"hi", 1, 2}, "");
  EXPECT_FALSE(refused.success);
  EXPECT_NE(refused.error.find("cannot connect"), std::string::npos) << refused.error;
}

}  // namespace
}  // namespace m3::bench
