// `m3 generate` from the command line, as a user runs it: reproduces the reference's greedy ids on every
// fixture checkpoint, also split over CPU ranks (under mpirun, and self-spawned), reports bad input lines by
// number while the others still run, and names bad flags.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/model_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace m3::testing {
namespace {
namespace fs = std::filesystem;

struct CliRun {
  int status;
  std::string err;
  std::vector<nlohmann::json> lines;
};

// `launcher`: a prefix such as "mpirun -np 2" (run as root, mpirun needs --allow-run-as-root).
CliRun m3_generate(const std::string& args, const std::string& input, const std::string& launcher = "") {
  static int counter = 0;
  fs::path dir =
      fs::temp_directory_path() / ("m3_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << input;
  std::string cmd = launcher + (launcher.empty() ? "" : " ") + std::string(M3_BINARY) + " generate " + args +
                    " --input " + (dir / "in.jsonl").string() + " --output " + (dir / "out.jsonl").string() +
                    " 2> " + (dir / "err.txt").string();
  CliRun r;
  r.status = WEXITSTATUS(std::system(cmd.c_str()));
  std::ifstream err(dir / "err.txt");
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  std::ifstream out(dir / "out.jsonl");
  for (std::string line; std::getline(out, line);) r.lines.push_back(nlohmann::json::parse(line));
  return r;
}

std::string golden_input(const std::vector<GoldenPrompt>& golden) {
  std::string input;
  for (const auto& g : golden)
    input += nlohmann::json({{"prompt_token_ids", g.prompt},
                             {"max_tokens", g.max_tokens},
                             {"temperature", 0},
                             {"ignore_eos", true}})
                 .dump() +
             "\n";
  return input;
}

// The reference's greedy ids, step by step while its top-1 / top-2 margin is at least 1e-3.
void expect_golden_ids(const CliRun& r, const std::vector<GoldenPrompt>& golden) {
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

class GenerateCli : public ::testing::TestWithParam<const char*> {};

TEST_P(GenerateCli, ReproducesReferenceGreedyIds) {
  auto golden = load_golden(GetParam());
  expect_golden_ids(m3_generate("--model " + fixture_model_dir(GetParam()) + " --max-num-batched-tokens 100",
                                golden_input(golden)),
                    golden);
}

std::string mpirun(int ranks) {
  // Containers often forbid the cross-process reads of Open MPI's shared-memory transport (self-spawns set
  // it).
  return "OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun -np " + std::to_string(ranks) +
         " --oversubscribe" + (::geteuid() == 0 ? " --allow-run-as-root" : "");
}

TEST(GenerateCliRanks, CpuRanksUnderMpirunReproduceReferenceGreedyIds) {
  for (const char* fixture : {"m3-tiny-msa", "m3-tiny-hf-sharded"}) {
    auto golden = load_golden(fixture);
    CliRun r = m3_generate("--model " + fixture_model_dir(fixture) +
                               " --device cpu --tensor-parallel-size 2" + " --max-num-batched-tokens 100",
                           golden_input(golden), mpirun(2));
    expect_golden_ids(r, golden);
    EXPECT_NE(r.err.find("rank 1 of 2"), std::string::npos) << "memory per rank in the start-up report\n"
                                                            << r.err;
  }
}

TEST(GenerateCliRanks, SelfSpawnedRanksReproduceReferenceGreedyIds) {
  // TP 4 on 4 KV heads, and TP 8: two ranks share each KV head.
  for (int tp : {4, 8}) {
    auto golden = load_golden("m3-tiny-msa");
    CliRun r = m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu --tp " +
                               std::to_string(tp) + " --max-num-batched-tokens 100",
                           golden_input(golden));
    expect_golden_ids(r, golden);
    EXPECT_NE(r.err.find("starting " + std::to_string(tp) + " ranks"), std::string::npos) << r.err;
  }
}

TEST(GenerateCliRanks, ExpertParallelRanksReproduceReferenceGreedyIds) {
  // Whole experts per rank (--enable-expert-parallel): 4 and 2 of m3-tiny-msa's 8, 4 of
  // m3-tiny-hf-sharded's 16.
  for (const auto& [fixture, tp] :
       {std::pair{"m3-tiny-msa", 2}, {"m3-tiny-msa", 4}, {"m3-tiny-hf-sharded", 4}}) {
    auto golden = load_golden(fixture);
    CliRun r =
        m3_generate("--model " + fixture_model_dir(fixture) + " --device cpu --enable-expert-parallel --tp " +
                        std::to_string(tp) + " --max-num-batched-tokens 100",
                    golden_input(golden));
    expect_golden_ids(r, golden);
  }
}

TEST(GenerateCliRanks, DataParallelAttentionRanksReproduceReferenceGreedyIds) {
  // DEP: each rank attends for its own prompts (the engine spreads them over the ranks) and holds 4, 2 or
  // 4 of the experts; the MoE layers exchange the tokens.
  for (const auto& [fixture, dp] :
       {std::pair{"m3-tiny-msa", 2}, {"m3-tiny-msa", 4}, {"m3-tiny-hf-sharded", 4}}) {
    auto golden = load_golden(fixture);
    CliRun r = m3_generate("--model " + fixture_model_dir(fixture) +
                               " --device cpu --enable-expert-parallel --data-parallel-size " +
                               std::to_string(dp) + " --max-num-batched-tokens 100",
                           golden_input(golden));
    expect_golden_ids(r, golden);
    EXPECT_NE(r.err.find("starting " + std::to_string(dp) + " ranks"), std::string::npos) << r.err;
  }
  // A static expert placement from a skewed histogram (experts 0-3 hot: in checkpoint order all on rank 0 of
  // 2): the slots are renumbered, routing and the greedy ids stay the reference's.
  const std::string loads = std::string(::testing::TempDir()) + "/expert_loads.json";
  std::ofstream(loads) << R"({"expert_tokens": [900, 800, 700, 600, 5, 4, 3, 2]})";
  for (const char* layout : {"--data-parallel-size 2", "--tp 4"}) {
    auto golden = load_golden("m3-tiny-msa");
    CliRun r = m3_generate("--model " + fixture_model_dir("m3-tiny-msa") +
                               " --device cpu --enable-expert-parallel " + layout + " --expert-placement " +
                               loads + " --max-num-batched-tokens 100",
                           golden_input(golden));
    expect_golden_ids(r, golden);
    EXPECT_NE(r.err.find("expert placement from"), std::string::npos) << r.err;
  }
  CliRun no_ep = m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu --dp 2", "");
  EXPECT_EQ(no_ep.status, 2);
  EXPECT_NE(no_ep.err.find("--data-parallel-size 2 needs --enable-expert-parallel"), std::string::npos)
      << no_ep.err;
}

TEST(GenerateCliRanks, RankErrorsAreNamed) {
  const std::string model = "--model " + fixture_model_dir("m3-tiny-hf-sharded") + " --device cpu";
  CliRun uneven = m3_generate(model + " --tp 3", "");
  EXPECT_EQ(uneven.status, 2);
  EXPECT_NE(uneven.err.find("--tensor-parallel-size 3: 4 query heads do not split into 3 ranks"),
            std::string::npos)
      << uneven.err;
  CliRun disagree = m3_generate(model + " --tp 4", "", mpirun(2));
  EXPECT_NE(disagree.status, 0);
  EXPECT_NE(disagree.err.find("--tensor-parallel-size 4 needs 4 ranks, and mpirun started 2"),
            std::string::npos)
      << disagree.err;
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
  const std::string one = "{\"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 2}\n";
  CliRun bad_quant =
      m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu -q int4", one);
  EXPECT_NE(bad_quant.status, 0);
  EXPECT_NE(bad_quant.err.find("--quantization 'int4'"), std::string::npos) << bad_quant.err;
  CliRun bad_kv =
      m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu --kv-cache-dtype fp4", one);
  EXPECT_NE(bad_kv.status, 0);
  EXPECT_NE(bad_kv.err.find("--kv-cache-dtype 'fp4'"), std::string::npos) << bad_kv.err;
  CliRun fp8_kv =
      m3_generate("--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu --kv-cache-dtype fp8", one);
  EXPECT_EQ(fp8_kv.status, 0) << fp8_kv.err;
  EXPECT_EQ(fp8_kv.lines.size(), 1u);
  // m3-tiny-hf-sharded's shared expert is 48 wide: its down projection is not whole blocks of 32 inputs.
  CliRun odd =
      m3_generate("--model " + fixture_model_dir("m3-tiny-hf-sharded") + " --device cpu -q fp8", one);
  EXPECT_NE(odd.status, 0);
  EXPECT_NE(odd.err.find("shared_experts.down_proj.weight"), std::string::npos) << odd.err;
}

TEST(GenerateCliQuantization, Fp8WeightsRunDeterministically) {
  const auto golden = load_golden("m3-tiny-msa");
  const std::string args = "--model " + fixture_model_dir("m3-tiny-msa") + " --device cpu --quantization fp8";
  CliRun a = m3_generate(args, golden_input(golden)), b = m3_generate(args, golden_input(golden));
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(a.lines.size(), golden.size());
  int differ = 0;
  for (size_t p = 0; p < golden.size(); ++p) {
    const auto ids = a.lines[p].at("output_token_ids").get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), golden[p].output.size());
    EXPECT_EQ(ids, b.lines.at(p).at("output_token_ids").get<std::vector<int32_t>>()) << "prompt " << p;
    differ += ids != golden[p].output;
  }
  // FP8 weights are a different model (tests/golden/fp8_golden_test.cc bounds how different); on this
  // high-gain fixture some greedy continuation must change, or the flag did nothing.
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace m3::testing

namespace m3::testing {
namespace {

// With a tokenizer in the model directory: "prompt" text, "text" in the output, and stop strings that end the
// request with the text cut before the match.
TEST(GenerateCliText, PromptTextStopStringsAndText) {
  const fs::path dir = fs::temp_directory_path() / ("m3_cli_tiny_" + std::to_string(::getpid()));
  const std::string make = std::string(M3_BINARY) + " make-random-model --preset tiny --out " + dir.string() +
                           " --tokenizer-from tests/fixtures/minimax-m3 2>/dev/null";
  ASSERT_EQ(std::system(make.c_str()), 0);
  const Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  CliRun free_run = m3_generate("--model " + dir.string(),
                                "{\"prompt\": \"Hello world\", \"max_tokens\": 12, \"temperature\": 0}\n");
  ASSERT_EQ(free_run.status, 0) << free_run.err;
  const auto ids = free_run.lines[0]["output_token_ids"].get<std::vector<int32_t>>();
  const std::string text = free_run.lines[0]["text"].get<std::string>();
  ASSERT_EQ(ids.size(), 12u);
  EXPECT_EQ(text, tok.decode(ids, /*skip_special_tokens=*/true));
  // Stop at the first character of the third token's text (a whole UTF-8 character: token texts often start
  // with a multi-byte one): the output must end before it.
  const std::string third = tok.decode(std::vector<int32_t>{ids[2]}, true);
  ASSERT_FALSE(third.empty());
  const unsigned char lead = static_cast<unsigned char>(third[0]);
  const size_t width = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  const std::string stop = third.substr(0, width);
  const size_t cut = text.find(stop);
  nlohmann::json req = {{"prompt", "Hello world"}, {"max_tokens", 12}, {"temperature", 0}, {"stop", {stop}}};
  CliRun stopped = m3_generate("--model " + dir.string(), req.dump() + "\n");
  ASSERT_EQ(stopped.status, 0) << stopped.err;
  EXPECT_EQ(stopped.lines[0]["finish_reason"], "stop");
  EXPECT_EQ(stopped.lines[0]["text"], text.substr(0, cut));
  EXPECT_LT(stopped.lines[0]["output_token_ids"].size(), 12u);

  // "messages" are rendered with the model's chat template exactly as `m3 tokenize` renders them.
  const std::string msgs =
      R"({"messages": [{"role": "user", "content": "Hi there"}], "add_generation_prompt": true})";
  const std::string tok_in = dir.string() + "/tok_in.json", tok_out = dir.string() + "/tok_out.json";
  std::ofstream(tok_in) << msgs;
  ASSERT_EQ(std::system((std::string(M3_BINARY) + " tokenize --tokenizer " + dir.string() + " < " + tok_in +
                         " > " + tok_out)
                            .c_str()),
            0);
  std::ifstream tin(tok_out);
  const auto ids_json = nlohmann::json::parse(tin)["tokens"];
  CliRun by_messages = m3_generate(
      "--model " + dir.string(),
      R"({"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 5, "temperature": 0})"
      "\n" +
          nlohmann::json({{"prompt_token_ids", ids_json}, {"max_tokens", 5}, {"temperature", 0}}).dump() +
          "\n");
  ASSERT_EQ(by_messages.status, 0) << by_messages.err;
  ASSERT_EQ(by_messages.lines.size(), 2u);
  EXPECT_EQ(by_messages.lines[0]["output_token_ids"], by_messages.lines[1]["output_token_ids"]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace m3::testing
