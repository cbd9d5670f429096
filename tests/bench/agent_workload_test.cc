// The agent workload: the drawn script (shared system prompt ids, first turns of exact length, deterministic,
// flag errors), and whole runs against the in-process SSE server: turn t+1's prompt is turn t's prompt +
// turn t's output + new user text (chat: the message list grows by assistant + user), a conversation's turns
// go one after another while conversations run side by side, --max-concurrency still bounds what is in
// flight, a failed turn ends its conversation, and cached_tokens from the usage reach the per-turn table.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/agent_report.h"
#include "bench/agent_workload.h"
#include "common/error.h"
#include "sse_test_server.h"

namespace m3::bench {
namespace {

using nlohmann::json;

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  return tok;
}

AgentWorkloadOptions options(int conversations, int turns, int system_len = 32, int turn_len = 8) {
  AgentWorkloadOptions o;
  o.conversations = conversations;
  o.turns = turns;
  o.system_len = system_len;
  o.turn_len = turn_len;
  o.output_len = 2;
  o.seed = 5;
  return o;
}

TEST(BenchAgentWorkload, DefaultsAndScript) {
  const AgentWorkloadOptions d;
  EXPECT_EQ(d.conversations, 8);
  EXPECT_EQ(d.turns, 8);
  EXPECT_EQ(d.system_len, 8192);
  EXPECT_EQ(d.turn_len, 1024);
  EXPECT_EQ(d.output_len, 128);

  const AgentWorkload w(tokenizer(), options(3, 2));
  EXPECT_EQ(w.num_requests(), 6u);
  std::vector<int32_t> system;
  std::set<std::string> firsts;
  for (int c = 0; c < 3; ++c) {
    const SampleRequest r = w.first_turn(c);
    const std::vector<int32_t> ids = tokenizer().encode(r.prompt);
    ASSERT_EQ(ids.size(), 40u) << "conversation " << c;
    EXPECT_EQ(r.prompt_len, 40);
    EXPECT_EQ(r.expected_output_len, 2);
    if (c == 0) system.assign(ids.begin(), ids.begin() + 32);
    EXPECT_TRUE(std::equal(system.begin(), system.end(), ids.begin())) << "conversation " << c;
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].role, "user");
    EXPECT_EQ(r.messages[0].content + r.messages[1].content, r.prompt);
    EXPECT_EQ(tokenizer().encode(r.messages[0].content), system);
    firsts.insert(r.messages[1].content);
  }
  EXPECT_EQ(firsts.size(), 3u);  // each conversation has its own user text

  RequestOutput out;
  out.generated_text = " the answer";
  out.output_tokens = 2;
  const SampleRequest next = w.next_turn(1, 1, w.first_turn(1), out);
  EXPECT_EQ(next.prompt.rfind(w.first_turn(1).prompt + " the answer", 0), 0u);
  EXPECT_GT(next.prompt.size(), w.first_turn(1).prompt.size() + 11);
  EXPECT_EQ(next.prompt_len, 40 + 2 + 8);
  ASSERT_EQ(next.messages.size(), 4u);
  EXPECT_EQ(next.messages[2].role, "assistant");
  EXPECT_EQ(next.messages[2].content, " the answer");
  EXPECT_EQ(next.messages[3].role, "user");
  EXPECT_EQ(next.prompt, w.first_turn(1).prompt + " the answer" + next.messages[3].content);

  const AgentWorkload again(tokenizer(), options(3, 2));
  EXPECT_EQ(again.first_turn(2).prompt, w.first_turn(2).prompt);
  EXPECT_EQ(again.next_turn(1, 1, w.first_turn(1), out).prompt, next.prompt);
  AgentWorkloadOptions other = options(3, 2);
  other.seed = 6;
  EXPECT_NE(AgentWorkload(tokenizer(), other).first_turn(0).prompt, w.first_turn(0).prompt);

  // No system prompt: no system message.
  const AgentWorkload bare(tokenizer(), options(1, 1, 0, 5));
  EXPECT_EQ(tokenizer().encode(bare.first_turn(0).prompt).size(), 5u);
  ASSERT_EQ(bare.first_turn(0).messages.size(), 1u);
  EXPECT_EQ(bare.first_turn(0).messages[0].role, "user");
}

void expect_error_naming(const AgentWorkloadOptions& o, const std::string& flag) {
  try {
    AgentWorkload w(tokenizer(), o);
    ADD_FAILURE() << "no error for " << flag;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(BenchAgentWorkload, BadOptionsNameTheFlag) {
  expect_error_naming(options(0, 2), "--agent-conversations");
  expect_error_naming(options(2, 0), "--agent-turns");
  expect_error_naming(options(2, 2, -1), "--agent-system-len");
  expect_error_naming(options(2, 2, 8, 0), "--agent-turn-len");
  AgentWorkloadOptions o = options(2, 2);
  o.output_len = 0;
  expect_error_naming(o, "--agent-output-len");
}

// An OpenAI-style server for agent runs: answers request id "agent-C-T" with the text " [reply C-T]" in two
// chunks and usage whose cached_tokens is the length of the conversation's previous prompt; records what
// each request sent, in arrival order. The request id in `fail_id` gets an HTTP 500.
class AgentServer {
 public:
  explicit AgentServer(ApiKind kind, size_t hold_until_open = 0, std::string fail_id = "")
      : kind_(kind),
        fail_id_(std::move(fail_id)),
        server_([this](const TestRequest& r) { return reply(r); }, hold_until_open) {}

  struct Seen {
    std::string id;
    json body;
  };
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t position(const std::string& id) {  // in arrival order; npos when never sent
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < seen_.size(); ++i)
      if (seen_[i].id == id) return i;
    return std::string::npos;
  }
  size_t peak_open() const { return server_.peak_open(); }
  std::string url() const { return server_.url(); }

 private:
  TestReply reply(const TestRequest& req) {
    const std::string id = req.headers.count("x-request-id") ? req.headers.at("x-request-id") : "";
    json body = json::parse(req.body, nullptr, false);
    int cached = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string conversation = id.substr(0, id.rfind('-'));
      for (const Seen& s : seen_)
        if (s.id.substr(0, s.id.rfind('-')) == conversation && s.body.contains("prompt"))
          cached = static_cast<int>(s.body["prompt"].get<std::string>().size());
      seen_.push_back({id, body});
    }
    if (id == fail_id_) return {500, {R"({"error":{"message":"engine exploded"}})"}};
    const std::string text = id.substr(std::string("agent-").size());
    auto chunk = [&](const std::string& piece) {
      const json c = kind_ == ApiKind::kChat
                         ? json{{"choices", {{{"index", 0}, {"delta", {{"content", piece}}}}}}}
                         : json{{"choices", {{{"index", 0}, {"text", piece}}}}};
      return "data: " + c.dump() + "\n\n";
    };
    const json usage = {{"choices", json::array()},
                        {"usage",
                         {{"prompt_tokens", 100},
                          {"completion_tokens", 2},
                          {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
    return {
        200,
        {chunk(" [reply"), chunk(" " + text + "]"), "data: " + usage.dump() + "\n\n", "data: [DONE]\n\n"}};
  }

  const ApiKind kind_;
  const std::string fail_id_;
  std::mutex mu_;
  std::vector<Seen> seen_;
  SseTestServer server_;  // last: stops first
};

constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

struct AgentRun {
  std::vector<AgentTurn> turns;
  int on_done = 0;
};

AgentRun run_agent(const AgentWorkload& w, AgentServer& server, ApiKind kind, size_t max_in_flight) {
  Endpoint ep;
  ep.base_url = server.url();
  ep.kind = kind;
  ep.path = kind == ApiKind::kChat ? "/v1/chat/completions" : "/v1/completions";
  ep.model = "m";
  HttpClient http;
  const auto epoch = std::chrono::steady_clock::now();
  const RequestClient client(ep, epoch, http);
  std::atomic<int> done{0};
  AgentRun r;
  r.turns = w.run(client, max_in_flight, std::vector<double>(size_t(w.options().conversations), 0.0), epoch,
                  "agent-", [&](const RequestOutput&) { ++done; });
  r.on_done = done;
  return r;
}

std::string id(int c, int t) {
  return "agent-" + std::to_string(c) + "-" + std::to_string(t);
}

TEST(BenchAgentWorkload, CompletionsTurnsExtendThePreviousTurnAndRunOneAfterAnother) {
  const int conversations = 3, turns = 4;
  const AgentWorkload w(tokenizer(), options(conversations, turns));
  AgentServer server(ApiKind::kCompletions, /*hold_until_open=*/conversations);
  const AgentRun r = run_agent(w, server, ApiKind::kCompletions, kUnbounded);
  ASSERT_EQ(r.turns.size(), size_t(conversations * turns));
  EXPECT_EQ(r.on_done, conversations * turns);
  EXPECT_EQ(server.peak_open(), size_t(conversations));  // the conversations were in flight side by side

  std::map<std::string, json> sent;
  for (const auto& s : server.seen()) sent[s.id] = s.body;
  for (int c = 0; c < conversations; ++c) {
    for (int t = 0; t < turns; ++t) {
      const AgentTurn& turn = r.turns[size_t(c * turns + t)];
      EXPECT_EQ(turn.conversation, c);
      EXPECT_EQ(turn.turn, t);
      ASSERT_TRUE(turn.output.success) << id(c, t) << ": " << turn.output.error;
      EXPECT_EQ(turn.output.generated_text, " [reply " + std::to_string(c) + "-" + std::to_string(t) + "]");
      ASSERT_TRUE(sent.count(id(c, t))) << id(c, t);
      EXPECT_EQ(sent[id(c, t)]["prompt"], turn.request.prompt) << id(c, t);
      EXPECT_EQ(sent[id(c, t)]["max_tokens"], 2);
      if (t == 0) {
        EXPECT_EQ(turn.request.prompt, w.first_turn(c).prompt);
        EXPECT_EQ(turn.output.cached_tokens, 0);
        continue;
      }
      const AgentTurn& prev = r.turns[size_t(c * turns + t - 1)];
      const std::string history = prev.request.prompt + prev.output.generated_text;
      EXPECT_EQ(turn.request.prompt.rfind(history, 0), 0u) << id(c, t);
      EXPECT_GT(turn.request.prompt.size(), history.size()) << id(c, t);  // and new user text
      EXPECT_GE(turn.output.start_time, prev.output.start_time + prev.output.latency) << id(c, t);
      EXPECT_GT(server.position(id(c, t)), server.position(id(c, t - 1))) << id(c, t);
      EXPECT_EQ(turn.output.cached_tokens, int(prev.request.prompt.size())) << id(c, t);
    }
  }

  const std::vector<TurnStats> stats = per_turn_stats(r.turns);
  ASSERT_EQ(stats.size(), size_t(turns));
  for (int t = 0; t < turns; ++t) {
    EXPECT_EQ(stats[size_t(t)].turn, t);
    EXPECT_EQ(stats[size_t(t)].requests, conversations);
    EXPECT_DOUBLE_EQ(stats[size_t(t)].mean_prompt_tokens, 100.0);  // the server's usage
    ASSERT_TRUE(stats[size_t(t)].mean_cached_tokens.has_value());
    if (t == 0) {
      EXPECT_EQ(*stats[0].mean_cached_tokens, 0.0);
    } else {
      EXPECT_GT(*stats[size_t(t)].mean_cached_tokens, *stats[size_t(t - 1)].mean_cached_tokens);
    }
  }
}

TEST(BenchAgentWorkload, ChatSendsTheGrowingMessageList) {
  const int conversations = 2, turns = 3;
  const AgentWorkload w(tokenizer(), options(conversations, turns));
  AgentServer server(ApiKind::kChat);
  const AgentRun r = run_agent(w, server, ApiKind::kChat, kUnbounded);
  std::map<std::string, json> sent;
  for (const auto& s : server.seen()) sent[s.id] = s.body;
  const std::string system = w.first_turn(0).messages[0].content;
  for (int c = 0; c < conversations; ++c) {
    for (int t = 0; t < turns; ++t) {
      const AgentTurn& turn = r.turns[size_t(c * turns + t)];
      ASSERT_TRUE(turn.output.success) << id(c, t) << ": " << turn.output.error;
      ASSERT_TRUE(sent.count(id(c, t))) << id(c, t);
      const json& messages = sent[id(c, t)]["messages"];
      EXPECT_FALSE(sent[id(c, t)].contains("prompt"));
      ASSERT_EQ(messages.size(), size_t(2 + 2 * t)) << id(c, t);
      EXPECT_EQ(messages[0], json({{"role", "system"}, {"content", system}}));
      for (int k = 0; k < t; ++k) {  // earlier exchanges, as they were sent and answered
        const json& user = messages[size_t(1 + 2 * k)];
        const json& assistant = messages[size_t(2 + 2 * k)];
        const AgentTurn& earlier = r.turns[size_t(c * turns + k)];
        EXPECT_EQ(user["role"], "user");
        EXPECT_EQ(user["content"], sent[id(c, k)]["messages"].back()["content"]) << id(c, t) << " turn " << k;
        EXPECT_EQ(assistant, json({{"role", "assistant"}, {"content", earlier.output.generated_text}}));
      }
      const json& last = messages.back();
      EXPECT_EQ(last["role"], "user");
      EXPECT_EQ(last["content"],
                json::array({{{"type", "text"}, {"text", turn.request.messages.back().content}}}));
    }
  }
}

TEST(BenchAgentWorkload, AFailedTurnEndsItsConversationOnly) {
  const AgentWorkload w(tokenizer(), options(2, 4));
  AgentServer server(ApiKind::kCompletions, 0, id(0, 1));
  const AgentRun r = run_agent(w, server, ApiKind::kCompletions, kUnbounded);
  EXPECT_EQ(r.on_done, 8);
  EXPECT_TRUE(r.turns[0].output.success);
  EXPECT_FALSE(r.turns[1].output.success);
  EXPECT_NE(r.turns[1].output.error.find("engine exploded"), std::string::npos) << r.turns[1].output.error;
  for (size_t i : {2u, 3u}) {
    EXPECT_FALSE(r.turns[i].output.success);
    EXPECT_NE(r.turns[i].output.error.find("turn 1 of conversation 0 failed"), std::string::npos)
        << r.turns[i].output.error;
  }
  EXPECT_EQ(server.position(id(0, 2)), std::string::npos);  // never sent
  EXPECT_EQ(server.position(id(0, 3)), std::string::npos);
  for (size_t i = 4; i < 8; ++i)
    EXPECT_TRUE(r.turns[i].output.success) << i << ": " << r.turns[i].output.error;

  const std::vector<TurnStats> stats = per_turn_stats(r.turns);
  EXPECT_EQ(stats[0].requests, 2);
  EXPECT_EQ(stats[1].requests, 1);
  EXPECT_EQ(stats[3].requests, 1);
}

TEST(BenchAgentWorkload, MaxConcurrencyStillBoundsTheRequestsInFlight) {
  const AgentWorkload w(tokenizer(), options(3, 3));
  AgentServer server(ApiKind::kCompletions);
  const AgentRun r = run_agent(w, server, ApiKind::kCompletions, 1);
  for (const AgentTurn& t : r.turns) EXPECT_TRUE(t.output.success) << t.output.error;
  EXPECT_EQ(server.peak_open(), 1u);
  EXPECT_EQ(server.seen().size(), 9u);
}

TEST(BenchAgentReport, PerTurnTableAndJson) {
  std::vector<AgentTurn> turns(4);
  const double ttft[] = {0.1, 0.3, 0.02, 0.5};
  for (size_t i = 0; i < 4; ++i) {
    turns[i].turn = static_cast<int>(i % 2);
    turns[i].output.success = i != 3;
    turns[i].output.ttft = ttft[i];
    turns[i].output.prompt_len = 100 * static_cast<int>(i + 1);
  }
  std::vector<TurnStats> s = per_turn_stats(turns);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].requests, 2);
  EXPECT_DOUBLE_EQ(s[0].mean_prompt_tokens, 200.0);  // turns 0 and 2
  EXPECT_NEAR(s[0].mean_ttft_ms, 60.0, 1e-9);
  EXPECT_NEAR(s[0].median_ttft_ms, 60.0, 1e-9);
  EXPECT_EQ(s[1].requests, 1);  // the failed one is left out
  EXPECT_NEAR(s[1].mean_ttft_ms, 300.0, 1e-9);
  EXPECT_FALSE(s[0].mean_cached_tokens.has_value());  // nobody reported cached_tokens
  std::string table = render_per_turn(s);
  EXPECT_NE(table.find("Per-Turn Agent Result"), std::string::npos) << table;
  EXPECT_EQ(table.find("cached"), std::string::npos) << table;
  EXPECT_TRUE(per_turn_json(s)[0]["mean_cached_tokens"].is_null());

  turns[2].output.cached_tokens = 50;  // one report: the others count as 0
  s = per_turn_stats(turns);
  ASSERT_TRUE(s[0].mean_cached_tokens.has_value());
  EXPECT_DOUBLE_EQ(*s[0].mean_cached_tokens, 25.0);
  EXPECT_DOUBLE_EQ(*s[1].mean_cached_tokens, 0.0);
  table = render_per_turn(s);
  EXPECT_NE(table.find("Mean cached"), std::string::npos) << table;
  EXPECT_NE(table.find("25.00"), std::string::npos) << table;
  const json j = json::parse(per_turn_json(s).dump());
  std::vector<std::string> keys;
  for (const auto& [key, value] : j[0].items()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"mean_cached_tokens", "mean_prompt_tokens", "mean_ttft_ms",
                                            "median_ttft_ms", "requests", "turn"}));
  EXPECT_EQ(j[1]["turn"], 1);
  EXPECT_EQ(j[1]["requests"], 1);
  EXPECT_NEAR(j[0]["median_ttft_ms"].get<double>(), 60.0, 1e-9);
  EXPECT_EQ(j[0]["mean_cached_tokens"], 25.0);
}

}  // namespace
}  // namespace m3::bench
