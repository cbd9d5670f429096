// `m3 tokenize` / `m3 detokenize` as a user runs them: every golden conversation and text (from HF
// transformers / tokenizers) gives exactly the golden ids and rendered prompt; bad input is a clear error,
// not a crash.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

namespace {

struct Result {
  int status;
  std::string out;
};

Result run(const std::string& args, const std::string& stdin_json) {
  // Unique per process and call: ctest runs the cases of this binary in parallel processes.
  static int calls = 0;
  const std::string in = testing::TempDir() + "/m3_tok_in_" + std::to_string(::getpid()) + "_" +
                         std::to_string(calls++) + ".json";
  std::ofstream(in) << stdin_json;
  std::string cmd = std::string(M3_BINARY) + " " + args + " < " + in + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p.get())) > 0;) out.append(buf, n);
  int status = pclose(p.release());
  std::remove(in.c_str());
  return {WEXITSTATUS(status), out};
}

nlohmann::ordered_json goldens() {
  std::ifstream in("tests/fixtures/minimax-m3/goldens.json");
  return nlohmann::ordered_json::parse(in);
}

TEST(TokenizeCli, GoldenConversationsRenderAndTokenizeExactly) {
  const auto g = goldens();
  ASSERT_FALSE(g["conversations"].empty());
  for (size_t i = 0; i < g["conversations"].size(); ++i) {
    const auto& c = g["conversations"][i];
    nlohmann::ordered_json req = {{"messages", c["messages"]},
                                  {"add_generation_prompt", c.value("add_generation_prompt", true)}};
    if (c.contains("tools")) req["tools"] = c["tools"];
    if (c.contains("kwargs")) req["chat_template_kwargs"] = c["kwargs"];
    Result r = run("tokenize --tokenizer tests/fixtures/minimax-m3", req.dump());
    ASSERT_EQ(r.status, 0) << "conversation " << i << ": " << r.out;
    const auto j = nlohmann::ordered_json::parse(r.out);
    EXPECT_EQ(j["prompt"], c["rendered"]) << "conversation " << i;
    EXPECT_EQ(j["tokens"], c["ids"]) << "conversation " << i;
  }
}

TEST(TokenizeCli, GoldenTextsRoundTrip) {
  const auto g = goldens();
  for (const auto& t : g["texts"]) {
    Result r =
        run("tokenize --tokenizer tests/fixtures/minimax-m3", nlohmann::json({{"prompt", t["text"]}}).dump());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], t["ids"]);
    Result d = run("detokenize --tokenizer tests/fixtures/minimax-m3",
                   nlohmann::json({{"tokens", t["ids"]}}).dump());
    ASSERT_EQ(d.status, 0) << d.out;
    EXPECT_EQ(nlohmann::json::parse(d.out)["prompt"], t["decoded"]);
  }
}

TEST(TokenizeCli, BadInputIsAClearError) {
  Result a = run("tokenize --tokenizer tests/fixtures/minimax-m3", "{not json");
  EXPECT_EQ(a.status, 2);
  EXPECT_NE(a.out.find("not valid JSON"), std::string::npos) << a.out;
  Result b = run("tokenize --tokenizer tests/fixtures/minimax-m3",
                 R"({"messages": [{"role": "wizard", "content": "x"}]})");
  EXPECT_EQ(b.status, 2);
  EXPECT_NE(b.out.find("wizard"), std::string::npos) << b.out;
  Result c = run("detokenize --tokenizer tests/fixtures/minimax-m3", R"({"tokens": [-1]})");
  EXPECT_EQ(c.status, 2);
  Result d = run("tokenize --tokenizer /nonexistent", R"({"prompt": "x"})");
  EXPECT_NE(d.status, 0);
  EXPECT_NE(d.out.find("/nonexistent"), std::string::npos) << d.out;
}

}  // namespace

namespace m3 {
namespace {

// `m3 bench kernels` hands its arguments to m3-kernel-bench next to the binary: without a CUDA build it says
// how to get one (exit 2); with one but no GPU the benchmark itself says so (exit 1); never a crash.
TEST(BenchKernelsCli, RunsTheKernelBenchmarkOrSaysWhyNot) {
  const Result r = run("bench kernels --filter no-such-kernel --iters 1", "");
  if (r.status == 2) {
    EXPECT_NE(r.out.find("m3-kernel-bench not found"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("-DM3_CUDA=ON"), std::string::npos) << r.out;
  } else {
    EXPECT_TRUE(r.out.find("no CUDA device") != std::string::npos ||
                r.out.find("device:") != std::string::npos)
        << "status " << r.status << ": " << r.out;
  }
}

}  // namespace
}  // namespace m3
