// The random dataset with the real MiniMax-M3 tokenizer: every prompt re-encodes to exactly its drawn length,
// the prefix's ids are shared by every prompt, a seed reproduces the dataset, and drawn lengths stay inside
// vLLM's range-ratio bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "bench/random_dataset.h"
#include "common/error.h"

namespace m3::bench {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  return tok;
}

RandomDatasetOptions options(int n, int input, int output, int prefix = 0, double ratio = 0.0,
                             uint64_t seed = 0) {
  RandomDatasetOptions o;
  o.num_prompts = n;
  o.input_len = input;
  o.output_len = output;
  o.prefix_len = prefix;
  o.range_ratio = ratio;
  o.seed = seed;
  return o;
}

TEST(BenchRandomDataset, PromptsEncodeToExactlyTheRequestedLength) {
  for (const int input : {1, 2, 7, 32, 100, 513}) {
    for (const uint64_t seed : {0ull, 1ull, 42ull}) {
      const auto reqs = sample_random_requests(tokenizer(), options(12, input, 16, 0, 0.0, seed));
      ASSERT_EQ(reqs.size(), 12u);
      for (size_t i = 0; i < reqs.size(); ++i) {
        const size_t got = tokenizer().encode(reqs[i].prompt).size();
        EXPECT_EQ(got, size_t(input)) << "input_len " << input << " seed " << seed << " prompt " << i;
        EXPECT_EQ(reqs[i].prompt_len, input) << "input_len " << input << " seed " << seed << " prompt " << i;
        EXPECT_EQ(reqs[i].expected_output_len, 16);
      }
    }
  }
}

TEST(BenchRandomDataset, PrefixIdsAreSharedByEveryPrompt) {
  const int prefix = 20, input = 30;
  const auto reqs = sample_random_requests(tokenizer(), options(16, input, 4, prefix, 0.0, 7));
  const std::vector<int32_t> first = tokenizer().encode(reqs[0].prompt);
  ASSERT_EQ(first.size(), size_t(prefix + input));
  std::set<std::string> distinct;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer().encode(reqs[i].prompt);
    ASSERT_EQ(ids.size(), size_t(prefix + input)) << "prompt " << i;
    EXPECT_EQ(reqs[i].prompt_len, prefix + input) << "prompt " << i;
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + prefix, ids.begin())) << "prompt " << i;
    distinct.insert(reqs[i].prompt);
  }
  EXPECT_EQ(distinct.size(), reqs.size());  // the parts after the prefix differ

  // A prefix alone (input length 0) is the whole prompt.
  const auto only_prefix = sample_random_requests(tokenizer(), options(3, 0, 4, 9, 0.0, 3));
  for (const auto& r : only_prefix) EXPECT_EQ(tokenizer().encode(r.prompt).size(), 9u);
}

TEST(BenchRandomDataset, SeedReproducesTheDataset) {
  const auto a = sample_random_requests(tokenizer(), options(8, 40, 8, 5, 0.3, 11));
  const auto b = sample_random_requests(tokenizer(), options(8, 40, 8, 5, 0.3, 11));
  const auto c = sample_random_requests(tokenizer(), options(8, 40, 8, 5, 0.3, 12));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt) << "prompt " << i;
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len) << "prompt " << i;
    EXPECT_EQ(a[i].expected_output_len, b[i].expected_output_len) << "prompt " << i;
  }
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].prompt == c[i].prompt;
  EXPECT_EQ(same, 0);
}

TEST(BenchRandomDataset, RangeRatioBounds) {
  EXPECT_EQ(input_length_range(10, 0.25).low, 7);    // floor(7.5)
  EXPECT_EQ(input_length_range(10, 0.25).high, 13);  // ceil(12.5)
  EXPECT_EQ(output_length_range(1, 0.5).low, 1);     // never 0 output tokens
  EXPECT_EQ(output_length_range(1, 0.5).high, 2);

  const auto reqs = sample_random_requests(tokenizer(), options(64, 40, 10, 4, 0.5, 5));
  std::set<int> inputs, outputs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int inner = reqs[i].prompt_len - 4;
    EXPECT_GE(inner, 20) << "prompt " << i;
    EXPECT_LE(inner, 60) << "prompt " << i;
    EXPECT_GE(reqs[i].expected_output_len, 5) << "prompt " << i;
    EXPECT_LE(reqs[i].expected_output_len, 15) << "prompt " << i;
    EXPECT_EQ(tokenizer().encode(reqs[i].prompt).size(), size_t(reqs[i].prompt_len)) << "prompt " << i;
    inputs.insert(inner);
    outputs.insert(reqs[i].expected_output_len);
  }
  EXPECT_GT(inputs.size(), 10u);  // lengths are actually drawn
  EXPECT_GT(outputs.size(), 5u);
}

void expect_error_naming(const RandomDatasetOptions& o, const std::string& flag) {
  try {
    sample_random_requests(tokenizer(), o);
    ADD_FAILURE() << "no error for " << flag;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(BenchRandomDataset, BadOptionsNameTheFlag) {
  expect_error_naming(options(4, 10, 4, 0, 1.0), "--random-range-ratio");
  expect_error_naming(options(4, 10, 4, 0, -0.1), "--random-range-ratio");
  expect_error_naming(options(4, 0, 4), "--random-input-len");
  expect_error_naming(options(4, 1, 4, 0, 0.5), "--random-input-len");  // floor(0.5) = 0 tokens possible
  expect_error_naming(options(0, 10, 4), "--num-prompts");
  expect_error_naming(options(4, 10, 0), "--random-output-len");
  expect_error_naming(options(4, 10, 4, -1), "--random-prefix-len");
}

}  // namespace
}  // namespace m3::bench
