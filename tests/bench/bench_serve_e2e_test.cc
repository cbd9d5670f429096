// `m3 bench serve` end to end: the real CLI against a real `m3 serve` on the tiny random model (real
// tokenizer and chat template), on /v1/completions and /v1/chat/completions, checking the result JSON
// (counts, vLLM's keys, per-request lists) and the printed report; the prefix_repetition dataset and the
// agent workload (per-turn table and JSON, both backends); a port with no server (every request failed, a
// clear report, exit status 0 as vLLM); and flag errors that name the flag.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/http_client.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct CliRun {
  int status = -1;
  std::string out, err;
  json result;  // the --save-result file, when one was written
};

class BenchServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("m3_bench_e2e_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = dir_ / "tiny-m3";
    const std::string make = std::string(M3_BINARY) + " make-random-model --preset tiny --out " +
                             model_.string() + " --tokenizer-from tests/fixtures/minimax-m3 2> " +
                             (dir_ / "make.log").string();
    ASSERT_EQ(std::system(make.c_str()), 0) << read_file(dir_ / "make.log");
    for (int attempt = 0; attempt < 3 && server_ < 0; ++attempt) start_server();
    ASSERT_GT(server_, 0) << "m3 serve did not become healthy:\n" << read_file(dir_ / "server.log");
  }

  static void TearDownTestSuite() {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  // Starts `m3 serve` on a free port and waits (bounded) for /health; leaves server_ < 0 on failure.
  static void start_server() {
    port_ = free_port();
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string log = (dir_ / "server.log").string(), port = std::to_string(port_);
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      ::dup2(::fileno(f), STDERR_FILENO);
      ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);  // idle OpenMP workers must not starve the bench client
      ::execl(M3_BINARY, M3_BINARY, "serve", model_.c_str(), "--host", "127.0.0.1", "--port", port.c_str(),
              "--served-model-name", "minimax-m3", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    m3::bench::HttpClientOptions options;
    options.connect_timeout = std::chrono::seconds(1);
    options.inactivity_timeout = std::chrono::seconds(5);
    m3::bench::HttpClient http(options);
    const std::string health = "http://127.0.0.1:" + std::to_string(port_) + "/health";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return;  // exited (port taken?): the caller retries
      if (http.fetch({"GET", health, {}, ""}).head.status == 200) {
        server_ = pid;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  static CliRun bench(const std::string& args, const std::string& result_name = "") {
    static int counter = 0;
    const fs::path out = dir_ / ("out" + std::to_string(counter) + ".txt");
    const fs::path err = dir_ / ("err" + std::to_string(counter++) + ".txt");
    std::string cmd = std::string(M3_BINARY) + " bench serve " + args;
    if (!result_name.empty())
      cmd +=
          " --save-result --result-dir " + (dir_ / "results").string() + " --result-filename " + result_name;
    cmd += " > " + out.string() + " 2> " + err.string();
    CliRun r;
    r.status = WEXITSTATUS(std::system(cmd.c_str()));
    r.out = read_file(out);
    r.err = read_file(err);
    if (!result_name.empty() && fs::exists(dir_ / "results" / result_name))
      r.result = json::parse(read_file(dir_ / "results" / result_name));
    return r;
  }

  void SetUp() override { ASSERT_TRUE(fs::exists(model_ / "tokenizer.json")) << "no tiny model"; }

  static std::string server_args() {
    return "--base-url http://127.0.0.1:" + std::to_string(port_) + " --model " + model_.string() +
           " --served-model-name minimax-m3";
  }

  static inline fs::path dir_, model_;
  static inline pid_t server_ = -1;
  static inline int port_ = 0;
};

const char* kVllmKeys[] = {"date",
                           "endpoint_type",
                           "backend",
                           "label",
                           "model_id",
                           "tokenizer_id",
                           "num_prompts",
                           "request_rate",
                           "burstiness",
                           "max_concurrency",
                           "duration",
                           "completed",
                           "failed",
                           "total_input_tokens",
                           "total_output_tokens",
                           "request_throughput",
                           "request_goodput",
                           "output_throughput",
                           "total_token_throughput",
                           "input_lens",
                           "output_lens",
                           "ttfts",
                           "itls",
                           "latencies",
                           "generated_texts",
                           "errors",
                           "max_output_tokens_per_s",
                           "max_concurrent_requests",
                           "mean_ttft_ms",
                           "median_ttft_ms",
                           "std_ttft_ms",
                           "p99_ttft_ms",
                           "mean_tpot_ms",
                           "median_tpot_ms",
                           "std_tpot_ms",
                           "p99_tpot_ms",
                           "mean_itl_ms",
                           "median_itl_ms",
                           "std_itl_ms",
                           "p99_itl_ms"};

const std::string kRun =
    " --num-prompts 8 --random-input-len 32 --random-output-len 8 --ignore-eos --max-concurrency 4 "
    "--save-detailed";

void expect_line(const std::string& out, const std::string& line) {
  EXPECT_NE(out.find("\n" + line + "\n"), std::string::npos) << "missing line '" << line << "' in:\n" << out;
}

TEST_F(BenchServe, CompletionsEndpoint) {
  ASSERT_GT(server_, 0) << "m3 serve is not running";
  const CliRun r = bench(server_args() + kRun, "completions.json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json& j = r.result;
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  for (const char* key : kVllmKeys) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["backend"], "openai");
  EXPECT_EQ(j["model_id"], model_.string());
  EXPECT_EQ(j["num_prompts"], 8);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_EQ(j["completed"], 8) << j["errors"];
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_output_tokens"], 64);
  EXPECT_EQ(j["total_input_tokens"], 8 * 32);  // usage.prompt_tokens: the prompts are exactly 32 tokens
  ASSERT_EQ(j["ttfts"].size(), 8u);
  ASSERT_EQ(j["itls"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_GT(j["ttfts"][i].get<double>(), 0.0) << i;
    EXPECT_EQ(j["itls"][i].size(), 7u) << i;  // one completions chunk per token
    EXPECT_EQ(j["output_lens"][i], 8) << i;
    EXPECT_EQ(j["input_lens"][i], 32) << i;
    EXPECT_EQ(j["errors"][i], "") << i;
  }
  EXPECT_LE(j["max_concurrent_requests"].get<int>(), 4);
  EXPECT_GT(j["mean_tpot_ms"].get<double>(), 0.0);

  EXPECT_NE(r.out.find("============ Serving Benchmark Result ============\n"), std::string::npos) << r.out;
  expect_line(r.out, "Successful requests:                     8         ");
  expect_line(r.out, "Failed requests:                         0         ");
  expect_line(r.out, "Maximum request concurrency:             4         ");
  expect_line(r.out, "Total input tokens:                      256       ");
  expect_line(r.out, "Total generated tokens:                  64        ");
  expect_line(r.out, "---------------Time to First Token----------------");
  expect_line(r.out, "-----Time per Output Token (excl. 1st token)------");
  expect_line(r.out, "---------------Inter-token Latency----------------");
  expect_line(r.out, "==================================================");
  for (const char* label :
       {"Benchmark duration (s):", "Request throughput (req/s):", "Output token throughput (tok/s):",
        "Total token throughput (tok/s):", "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):",
        "Mean TPOT (ms):", "P99 ITL (ms):"})
    EXPECT_NE(r.out.find(std::string("\n").append(label)), std::string::npos) << label << "\n" << r.out;
  EXPECT_EQ(r.out.find("End-to-end Latency"), std::string::npos) << r.out;
}

TEST_F(BenchServe, ChatEndpoint) {
  ASSERT_GT(server_, 0) << "m3 serve is not running";
  const CliRun r = bench(server_args() + " --backend openai-chat" + kRun, "chat.json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json& j = r.result;
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  for (const char* key : kVllmKeys) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["backend"], "openai-chat");
  EXPECT_EQ(j["completed"], 8) << j["errors"];
  EXPECT_EQ(j["total_output_tokens"], 64);
  ASSERT_EQ(j["itls"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    // Chunks: the role chunk with the first token, one per token with text, and the finish chunk.
    EXPECT_GE(j["itls"][i].size(), 1u) << i;
    EXPECT_LE(j["itls"][i].size(), 9u) << i;
    EXPECT_GT(j["input_lens"][i].get<int>(), 32) << i;  // the chat template adds tokens
    EXPECT_EQ(j["output_lens"][i], 8) << i;
  }
  expect_line(r.out, "Successful requests:                     8         ");
  expect_line(r.out, "Total generated tokens:                  64        ");
}

TEST_F(BenchServe, RateLimitedRunWithMetadataPercentilesAndGoodput) {
  ASSERT_GT(server_, 0) << "m3 serve is not running";
  const CliRun r = bench(server_args() +
                             " --num-prompts 6 --random-input-len 16 --random-output-len 4 --request-rate 50 "
                             "--burstiness 0.5 --percentile-metrics ttft,e2el --metric-percentiles 50,99.9 "
                             "--goodput e2el:600000 --metadata run=ci tp=1 --label m3 --disable-tqdm",
                         "rate.json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json& j = r.result;
  EXPECT_EQ(j["completed"], 6) << r.out;
  EXPECT_EQ(j["request_rate"], 50.0);
  EXPECT_EQ(j["burstiness"], 0.5);
  EXPECT_TRUE(j["max_concurrency"].is_null());
  EXPECT_EQ(j["label"], "m3");
  EXPECT_EQ(j["run"], "ci");
  EXPECT_EQ(j["tp"], "1");
  EXPECT_GT(j["request_goodput"].get<double>(), 0.0);  // every request meets a 10-minute objective
  EXPECT_TRUE(j.contains("p99.9_e2el_ms"));
  EXPECT_TRUE(j.contains("p50_ttft_ms"));
  EXPECT_FALSE(j.contains("mean_tpot_ms"));
  EXPECT_FALSE(j.contains("ttfts"));  // per-request lists only with --save-detailed
  EXPECT_FALSE(j.contains("itls"));
  expect_line(r.out, "Request rate configured (RPS):           50.00     ");
  expect_line(r.out, "----------------End-to-end Latency----------------");
  EXPECT_NE(r.out.find("\nP99.9 E2EL (ms):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nRequest goodput (req/s):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Burstiness factor: 0.5 (Gamma distribution)"), std::string::npos) << r.out;
}

TEST_F(BenchServe, PrefixRepetitionDataset) {
  ASSERT_GT(server_, 0) << "m3 serve is not running";
  const CliRun r =
      bench(server_args() +
                " --dataset-name prefix_repetition --num-prompts 6 --prefix-repetition-prefix-len 32 "
                "--prefix-repetition-suffix-len 8 --prefix-repetition-num-prefixes 2 "
                "--prefix-repetition-output-len 4 --output-len 3 --ignore-eos --disable-tqdm",
            "prefix_repetition.json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json& j = r.result;
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  EXPECT_EQ(j["num_prompts"], 6);
  EXPECT_EQ(j["completed"], 6) << r.out;
  EXPECT_EQ(j["total_input_tokens"], 6 * 40);  // every prompt is exactly prefix + suffix tokens
  EXPECT_EQ(j["total_output_tokens"], 6 * 3);  // --output-len overrides the dataset's output length
  EXPECT_FALSE(j.contains("per_turn"));
}

TEST_F(BenchServe, AgentWorkload) {
  ASSERT_GT(server_, 0) << "m3 serve is not running";
  for (const std::string backend : {"openai", "openai-chat"}) {
    const CliRun r = bench(server_args() + " --backend " + backend +
                               " --dataset-name agent --agent-conversations 2 --agent-turns 3 "
                               "--agent-system-len 64 --agent-turn-len 16 --agent-output-len 4 "
                               "--max-concurrency 2 --disable-tqdm",
                           "agent-" + backend + ".json");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const json& j = r.result;
    ASSERT_TRUE(j.is_object()) << r.out << r.err;
    EXPECT_EQ(j["num_prompts"], 6) << backend;
    EXPECT_EQ(j["completed"], 6) << backend << "\n" << r.out;
    EXPECT_EQ(j["total_output_tokens"], 6 * 4) << backend;  // ignore_eos: every turn runs to its length
    ASSERT_EQ(j["per_turn"].size(), 3u) << backend << ": " << j.dump();
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(j["per_turn"][t]["turn"], t) << backend;
      EXPECT_EQ(j["per_turn"][t]["requests"], 2) << backend;
      EXPECT_GT(j["per_turn"][t]["mean_ttft_ms"].get<double>(), 0.0) << backend;
      if (t > 0) {  // each turn carries the previous one, its answer and 16 new tokens
        EXPECT_GE(j["per_turn"][t]["mean_prompt_tokens"].get<double>(),
                  j["per_turn"][t - 1]["mean_prompt_tokens"].get<double>() + 16)
            << backend;
      }
    }
    const size_t report = r.out.find("Serving Benchmark Result"), table = r.out.find("Per-Turn Agent Result");
    ASSERT_NE(table, std::string::npos) << r.out;
    EXPECT_LT(report, table) << r.out;
  }
}

TEST_F(BenchServe, NoServerMeansEveryRequestFailed) {
  const int port = free_port();
  const CliRun r =
      bench("--port " + std::to_string(port) + " --model " + model_.string() + kRun, "none.json");
  EXPECT_EQ(r.status, 0) << r.out << r.err;  // vLLM prints the report and exits 0
  const json& j = r.result;
  ASSERT_TRUE(j.is_object()) << r.out << r.err;
  EXPECT_EQ(j["completed"], 0);
  EXPECT_EQ(j["failed"], 8);
  EXPECT_EQ(j["total_output_tokens"], 0);
  EXPECT_EQ(j["mean_ttft_ms"], 0.0);
  for (const auto& e : j["errors"])
    EXPECT_NE(e.get<std::string>().find("cannot connect"), std::string::npos) << e;
  expect_line(r.out, "Successful requests:                     0         ");
  expect_line(r.out, "Failed requests:                         8         ");
  EXPECT_NE(
      r.out.find("Failed requests during benchmark run detected (capping to 10):\nError 0: cannot connect"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("All requests failed"), std::string::npos) << r.err;
}

TEST_F(BenchServe, BadFlagsAreNamed) {
  const std::string base = server_args() + " --num-prompts 2 --random-input-len 4 --random-output-len 2";
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {" --dataset-name sharegpt", "--dataset-name"},
           {" --max-concurrency 0", "--max-concurrency"},
           {" --backend tgi", "--backend"},
           {" --percentile-metrics ttft,nope", "--percentile-metrics"},
           {" --metric-percentiles 101", "--metric-percentiles"},
           {" --request-rate 0", "--request-rate"},
           {" --endpoint /v1/embeddings", "--endpoint"},
           {" --random-range-ratio 1", "--random-range-ratio"},
           {" --metadata novalue", "--metadata"},
           {" --goodput ttft", "--goodput"},
           {" --tokenizer /nonexistent/tok", "--tokenizer"},
           {" --dataset-name prefix_repetition --prefix-repetition-num-prefixes 5",
            "--prefix-repetition-num-prefixes"},
           {" --dataset-name agent --agent-turns 0", "--agent-turns"}}) {
    const CliRun r = bench(base + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.err.find(flag), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
