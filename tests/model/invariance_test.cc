// The CPU backend computes each token exactly the same way however the work is batched or chunked: blocks are
// anchored at absolute positions, tokens never see the future (also inside the query's own MSA block), and
// other sequences in the batch have no influence. Logits and MSA selections must be bit-identical.
#include <gtest/gtest.h>

#include <random>

#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

// Runs `prompt` split into `chunks` and returns the last logits and the concatenated MSA trace.
std::pair<std::vector<float>, std::vector<std::vector<BlockSelection>>> run_chunked(
    ModelBackend& model, const std::vector<int32_t>& prompt, const std::vector<int>& chunks) {
  SequenceRunner run(model);
  int s = run.add_sequence();
  ForwardOptions opt;
  opt.trace_msa = true;
  std::vector<float> logits;
  std::vector<std::vector<BlockSelection>> trace(model.config().num_layers);
  size_t at = 0;
  for (int n : chunks) {
    ForwardOutput out;
    logits =
        run.step({{s, std::vector<int32_t>(prompt.begin() + at, prompt.begin() + at + n)}}, opt, &out)[0];
    for (size_t l = 0; l < out.msa_trace.size(); ++l)
      trace[l].insert(trace[l].end(), out.msa_trace[l].begin(), out.msa_trace[l].end());
    at += n;
  }
  EXPECT_EQ(at, prompt.size());
  return {logits, trace};
}

TEST(Invariance, AnyPrefillChunkingGivesIdenticalLogitsAndSelections) {
  auto model = load_fixture("m3-tiny-msa");
  const auto prompt = random_prompt(150, model->config().vocab_size, 11);  // 19 blocks of 8 > top-k 4
  auto [ref_logits, ref_trace] = run_chunked(*model, prompt, {150});
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<int> chunks;
    for (int left = 150; left > 0;) {
      int n = std::min(left, 1 + static_cast<int>(rng() % 40));
      chunks.push_back(n);
      left -= n;
    }
    auto [logits, trace] = run_chunked(*model, prompt, chunks);
    EXPECT_EQ(logits, ref_logits) << "trial " << trial;
    EXPECT_EQ(trace, ref_trace) << "trial " << trial;
  }
}

// Prefix caching hands a sequence pages another sequence computed: the K/V and index keys there must be what
// the sequence would have computed itself, so the rest of its prompt gives bit-identical logits and MSA
// selections to a cold run (the donor sequence goes on decoding meanwhile, in the same batches).
TEST(Invariance, PrefixPagesComputedByAnotherSequenceGiveTheColdResult) {
  auto model = load_fixture("m3-tiny-msa");  // 8-token pages
  const int vocab = model->config().vocab_size;
  const auto head = random_prompt(72, vocab, 21);  // 9 pages
  std::vector<int32_t> prompt = head;
  for (int32_t t : random_prompt(45, vocab, 22)) prompt.push_back(t);
  auto [cold_logits, cold_trace] = run_chunked(*model, prompt, {117});

  SequenceRunner run(*model);
  const int donor = run.add_sequence();
  run.step({{donor, head}});
  const int s = run.fork_sequence(donor, 9);
  ForwardOptions opt;
  opt.trace_msa = true;
  ForwardOutput out;
  const auto logits =
      run.step({{s, std::vector<int32_t>(prompt.begin() + 72, prompt.end())}, {donor, {5}}}, opt, &out)[0];
  EXPECT_EQ(logits, cold_logits);
  for (size_t l = 0; l < out.msa_trace.size(); ++l) {
    if (out.msa_trace[l].empty()) continue;  // dense layer
    for (size_t t = 0; t < 45; ++t)
      EXPECT_EQ(out.msa_trace[l][t], cold_trace[l][72 + t]) << "layer " << l << " position " << 72 + t;
  }
}

TEST(Invariance, CausalityInsideTheLocalBlock) {
  // Token by token, no token can see a later one; in one chunk, a leak to later tokens of the same block
  // (the query's forced local block) would change the result.
  auto model = load_fixture("m3-tiny-msa");
  const auto prompt = random_prompt(45, model->config().vocab_size, 12);
  auto [one_shot, t1] = run_chunked(*model, prompt, {45});
  auto [stepwise, t2] = run_chunked(*model, prompt, std::vector<int>(45, 1));
  EXPECT_EQ(one_shot, stepwise);
  EXPECT_EQ(t1, t2);
}

TEST(Invariance, BatchingWithOtherSequencesGivesIdenticalLogits) {
  auto model = load_fixture("m3-tiny-hf-sharded");
  const int vocab = model->config().vocab_size;
  const auto target = random_prompt(70, vocab, 21);
  auto [alone, unused] = run_chunked(*model, target, {70});
  for (int position = 0; position < 3; ++position) {
    SequenceRunner run(*model);
    std::vector<std::pair<int, std::vector<int32_t>>> work;
    for (int i = 0; i < 3; ++i)
      work.push_back({run.add_sequence(), random_prompt(13 + 29 * i, vocab, 30 + i)});
    int target_id = run.add_sequence();
    work.insert(work.begin() + position, {target_id, target});
    auto rows = run.step(work);
    EXPECT_EQ(rows[position], alone) << "target at batch position " << position;
  }
}

TEST(Invariance, RealBlockSizeChunkedPrefillMatchesOneShot) {
  auto model = load_fixture("m3-tiny-block128");
  const auto prompt = random_prompt(2300, model->config().vocab_size, 41);  // 18 blocks of 128 > top-k 16
  auto [one_shot, t1] = run_chunked(*model, prompt, {2300});
  auto [chunked, t2] = run_chunked(*model, prompt, {1024, 1000, 275, 1});
  EXPECT_EQ(one_shot, chunked);
  EXPECT_EQ(t1, t2);
}

TEST(MsaTrace, SelectionIsPerGroupWithForcedLocalBlockAndNoFuture) {
  auto model = load_fixture("m3-tiny-msa");
  const MsaConfig& msa = model->config().msa;
  const auto prompt = random_prompt(150, model->config().vocab_size, 13);
  auto [logits, trace] = run_chunked(*model, prompt, {150});
  int differing = 0;
  for (size_t l = 0; l < trace.size(); ++l) {
    if (!model->config().sparse_attention[l]) {
      EXPECT_TRUE(trace[l].empty());
      continue;
    }
    ASSERT_EQ(trace[l].size(), prompt.size());
    for (size_t t = 0; t < prompt.size(); ++t) {
      const int32_t local = static_cast<int32_t>(t / msa.block_size);
      const BlockSelection& sel = trace[l][t];
      ASSERT_EQ(static_cast<int>(sel.size()), msa.num_index_heads);
      for (const auto& group : sel) {
        EXPECT_EQ(static_cast<int>(group.size()), std::min(msa.topk_blocks, local + 1));
        EXPECT_EQ(group.back(), local) << "local block forced and no future block (sorted ascending)";
      }
      for (size_t g = 1; g < sel.size(); ++g) differing += sel[g] != sel[0];
    }
  }
  EXPECT_GT(differing, 0)
      << "groups select independently, so with random weights they must disagree somewhere";
}

}  // namespace
}  // namespace m3::testing
