// vLLM's prefix_repetition dataset with the real MiniMax-M3 tokenizer: every prompt re-encodes to prefix_len
// + suffix_len tokens, the requests fall evenly into num_prefixes groups that share their prefix's ids (and
// only those), the order is shuffled, a seed reproduces the dataset, and bad options name the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "bench/prefix_repetition_dataset.h"
#include "common/error.h"

namespace m3::bench {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
  return tok;
}

PrefixRepetitionOptions options(int n, int prefix, int suffix, int prefixes, int output = 7,
                                uint64_t seed = 0) {
  PrefixRepetitionOptions o;
  o.num_prompts = n;
  o.prefix_len = prefix;
  o.suffix_len = suffix;
  o.num_prefixes = prefixes;
  o.output_len = output;
  o.seed = seed;
  return o;
}

TEST(BenchPrefixRepetitionDataset, DefaultsAreVllms) {
  const PrefixRepetitionOptions o;
  EXPECT_EQ(o.prefix_len, 256);
  EXPECT_EQ(o.suffix_len, 256);
  EXPECT_EQ(o.num_prefixes, 10);
  EXPECT_EQ(o.output_len, 128);
}

TEST(BenchPrefixRepetitionDataset, PromptsShareTheirPrefixIdsInEvenGroups) {
  const int prefix = 24, suffix = 16;
  const auto reqs = sample_prefix_repetition_requests(tokenizer(), options(23, prefix, suffix, 4, 5, 3));
  ASSERT_EQ(reqs.size(), 23u);
  std::map<std::vector<int32_t>, int> groups;  // prefix ids -> requests
  std::set<std::vector<int32_t>> suffixes;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer().encode(reqs[i].prompt);
    ASSERT_EQ(ids.size(), size_t(prefix + suffix)) << "prompt " << i;
    EXPECT_EQ(reqs[i].prompt_len, prefix + suffix) << "prompt " << i;
    EXPECT_EQ(reqs[i].expected_output_len, 5);
    EXPECT_TRUE(reqs[i].messages.empty());
    ++groups[std::vector<int32_t>(ids.begin(), ids.begin() + prefix)];
    suffixes.insert(std::vector<int32_t>(ids.begin() + prefix, ids.end()));
  }
  std::vector<int> sizes;
  for (const auto& [ids, n] : groups) sizes.push_back(n);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int>{5, 6, 6, 6}));  // 23 over 4 prefixes
  EXPECT_EQ(suffixes.size(), reqs.size());           // every suffix is its own

  // Shuffled: the groups do not come round-robin (prefix i % 4) or in blocks.
  std::vector<std::vector<int32_t>> order;
  for (const auto& r : reqs) {
    const std::vector<int32_t> ids = tokenizer().encode(r.prompt);
    order.emplace_back(ids.begin(), ids.begin() + prefix);
  }
  bool round_robin = true, blocks = true;
  for (size_t i = 4; i < order.size(); ++i) round_robin = round_robin && order[i] == order[i - 4];
  for (size_t i = 1; i < 6; ++i) blocks = blocks && order[i] == order[0];
  EXPECT_FALSE(round_robin);
  EXPECT_FALSE(blocks);
}

TEST(BenchPrefixRepetitionDataset, SeedReproducesTheDataset) {
  const auto a = sample_prefix_repetition_requests(tokenizer(), options(12, 10, 8, 3, 4, 11));
  const auto b = sample_prefix_repetition_requests(tokenizer(), options(12, 10, 8, 3, 4, 11));
  const auto c = sample_prefix_repetition_requests(tokenizer(), options(12, 10, 8, 3, 4, 12));
  ASSERT_EQ(a.size(), b.size());
  std::set<std::string> in_c;
  for (const auto& r : c) in_c.insert(r.prompt);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt) << "prompt " << i;
    EXPECT_EQ(a[i].prompt_len, b[i].prompt_len) << "prompt " << i;
    EXPECT_FALSE(in_c.count(a[i].prompt)) << "prompt " << i;
  }
}

TEST(BenchPrefixRepetitionDataset, EmptyPrefixOrSuffix) {
  const auto no_suffix = sample_prefix_repetition_requests(tokenizer(), options(6, 12, 0, 2));
  std::set<std::string> distinct;
  for (const auto& r : no_suffix) {
    EXPECT_EQ(tokenizer().encode(r.prompt).size(), 12u);
    distinct.insert(r.prompt);
  }
  EXPECT_EQ(distinct.size(), 2u);  // each prompt is its prefix

  const auto no_prefix = sample_prefix_repetition_requests(tokenizer(), options(6, 0, 9, 2));
  distinct.clear();
  for (const auto& r : no_prefix) {
    EXPECT_EQ(tokenizer().encode(r.prompt).size(), 9u);
    distinct.insert(r.prompt);
  }
  EXPECT_EQ(distinct.size(), 6u);
}

void expect_error_naming(const PrefixRepetitionOptions& o, const std::vector<std::string>& flags) {
  try {
    sample_prefix_repetition_requests(tokenizer(), o);
    ADD_FAILURE() << "no error for " << flags.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    for (const std::string& flag : flags)
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(BenchPrefixRepetitionDataset, BadOptionsNameTheFlag) {
  expect_error_naming(options(3, 8, 8, 4), {"--num-prompts", "--prefix-repetition-num-prefixes"});
  expect_error_naming(options(4, 8, 8, 0), {"--prefix-repetition-num-prefixes"});
  expect_error_naming(options(4, -1, 8, 2), {"--prefix-repetition-prefix-len"});
  expect_error_naming(options(4, 8, -1, 2), {"--prefix-repetition-suffix-len"});
  expect_error_naming(options(4, 0, 0, 2),
                      {"--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len"});
  expect_error_naming(options(4, 8, 8, 2, 0), {"--prefix-repetition-output-len"});
  expect_error_naming(options(0, 8, 8, 1), {"--num-prompts"});
}

}  // namespace
}  // namespace m3::bench
