// `m3 generate` from the command line, as a user runs it: reproduces the reference's greedy ids on every
// fixture checkpoint, reports bad input lines by number while the others still run, and names bad flags.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/model_fixtures.h"

namespace m3::testing {
namespace {
namespace fs = std::filesystem;

struct CliRun {
  int status;
  std::string err;
  std::vector<nlohmann::json> lines;
};

CliRun m3_generate(const std::string& args, const std::string& input) {
  static int counter = 0;
  fs::path dir =
      fs::temp_directory_path() / ("m3_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << input;
  std::string cmd = std::string(M3_BINARY) + " generate " + args + " --input " + (dir / "in.jsonl").string() +
                    " --output " + (dir / "out.jsonl").string() + " 2> " + (dir / "err.txt").string();
  CliRun r;
  r.status = WEXITSTATUS(std::system(cmd.c_str()));
  std::ifstream err(dir / "err.txt");
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  std::ifstream out(dir / "out.jsonl");
  for (std::string line; std::getline(out, line);) r.lines.push_back(nlohmann::json::parse(line));
  return r;
}

class GenerateCli : public ::testing::TestWithParam<const char*> {};

TEST_P(GenerateCli, ReproducesReferenceGreedyIds) {
  auto golden = load_golden(GetParam());
  std::string input;
  for (const auto& g : golden)
    input += nlohmann::json({{"prompt_token_ids", g.prompt},
                             {"max_tokens", g.max_tokens},
                             {"temperature", 0},
                             {"ignore_eos", true}})
                 .dump() +
             "\n";
  CliRun r = m3_generate("--model " + fixture_model_dir(GetParam()) + " --max-num-batched-tokens 100", input);
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.lines.size(), golden.size());
  for (size_t p = 0; p < golden.size(); ++p) {
    EXPECT_EQ(r.lines[p]["index"], p);
    EXPECT_EQ(r.lines[p]["finish_reason"], "length");
    auto got = r.lines[p]["output_token_ids"].get<std::vector<int32_t>>();
    for (size_t s = 0; s < golden[p].output.size() && golden[p].steps[s].margin >= 1e-3f; ++s)
      ASSERT_EQ(got.at(s), golden[p].output[s]) << "prompt " << p << " step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateCli, ::testing::ValuesIn(kFixtureNames), [](const auto& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

TEST(GenerateCliErrors, BadLinesAreReportedAndTheRestRun) {
  const std::string input =
      "{\"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 2, \"temperature\": 0}\n"
      "\n"
      "{not json\n"
      "{\"prompt_token_ids\": [1, 99999], \"max_tokens\": 2}\n"
      "{\"prompt_token_ids\": \"abc\"}\n"
      "{\"prompt_token_ids\": [4, 5], \"max_tokens\": 3, \"temperature\": 0.8, \"seed\": 7}\n"
      "{\"prompt\": \"hello\"}\n";
  CliRun r = m3_generate("--model " + fixture_model_dir("m3-tiny-msa"), input);
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(r.lines.size(), 6u);
  EXPECT_EQ(r.lines[0]["output_token_ids"].size(), 2u);
  EXPECT_EQ(r.lines[1]["error"]["line"], 3);
  EXPECT_EQ(r.lines[2]["error"]["line"], 4);
  EXPECT_NE(r.lines[2]["error"]["message"].get<std::string>().find("99999"), std::string::npos);
  EXPECT_NE(r.lines[3]["error"]["message"].get<std::string>().find("prompt_token_ids"), std::string::npos);
  EXPECT_EQ(r.lines[4]["output_token_ids"].size(), 3u);
  EXPECT_NE(r.lines[5]["error"]["message"].get<std::string>().find("tokenizer"), std::string::npos);
  EXPECT_NE(r.err.find("input line 3"), std::string::npos) << r.err;
}

TEST(GenerateCliErrors, BadFlagsAndModelsAreNamed) {
  CliRun bad_device = m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device tpu", "");
  EXPECT_NE(bad_device.status, 0);
  EXPECT_NE(bad_device.err.find("--device"), std::string::npos) << bad_device.err;
  CliRun missing = m3_generate("--model /nonexistent/model", "{\"prompt_token_ids\": [1]}\n");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("/nonexistent/model"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace m3::testing
