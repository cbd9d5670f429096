// Scheduler policy: token budget, sequence cap, block-aligned prefill chunks, decode-first ordering,
// preemption by recompute when pages run out, and pages returned on finish.
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "support/token_ramp.h"

namespace m3 {
namespace {

std::vector<int32_t> tokens(int n) {
  return std::vector<int32_t>(n, 7);
}

// Runs a full step: commit and append one token for every sampling chunk.
StepPlan step(Scheduler& s) {
  StepPlan p = s.schedule();
  s.commit(p);
  for (const auto& c : p.chunks)
    if (c.samples) s.append_token(c.seq_id, 1);
  return p;
}

TEST(Scheduler, ChunkedPrefillAlignedToPages) {
  Scheduler s({8, 300}, 100, 128);
  s.add(1, tokens(1000));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].num_tokens, 256) << "300-token budget cut back to a 128 boundary";
  EXPECT_FALSE(p.chunks[0].samples);
  s.commit(p);
  p = s.schedule();
  EXPECT_EQ(p.chunks[0].start_pos, 256);
  EXPECT_EQ(p.chunks[0].num_tokens, 256);
  s.commit(p);
  p = s.schedule();
  s.commit(p);
  p = s.schedule();
  EXPECT_EQ(p.chunks[0].start_pos, 768);
  EXPECT_EQ(p.chunks[0].num_tokens, 232);
  EXPECT_TRUE(p.chunks[0].samples);
}

TEST(Scheduler, BudgetAndSequenceCap) {
  Scheduler s({2, 100}, 100, 16);
  s.add(1, tokens(30));
  s.add(2, tokens(30));
  s.add(3, tokens(30));
  StepPlan p = step(s);
  EXPECT_EQ(p.chunks.size(), 2u) << "max_num_seqs = 2";
  EXPECT_LE(p.num_tokens, 100);
  EXPECT_EQ(s.num_waiting(), 1u);
  p = step(s);  // two decodes
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].num_tokens, 1);
  EXPECT_TRUE(p.chunks[0].samples);
  s.finish(1);
  p = step(s);
  ASSERT_EQ(p.chunks.size(), 2u) << "a finished sequence makes room for the waiting one";
  EXPECT_EQ(p.chunks[0].seq_id, 2);
  EXPECT_EQ(p.chunks[1].seq_id, 3);
  EXPECT_EQ(p.chunks[1].num_tokens, 30);
}

TEST(Scheduler, DecodesRunBeforeNewPrefills) {
  Scheduler s({8, 40}, 100, 16);
  s.add(1, tokens(10));
  step(s);
  s.add(2, tokens(100));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq_id, 1);
  EXPECT_EQ(p.chunks[0].num_tokens, 1);
  EXPECT_EQ(p.chunks[1].seq_id, 2);
  EXPECT_EQ(p.chunks[1].num_tokens, 32) << "39 left in the budget, cut to a 16 boundary";
}

TEST(Scheduler, PreemptsTheNewestWhenPagesRunOut) {
  Scheduler s({8, 1000}, 4, 16);  // 64 tokens of KV in total
  s.add(1, tokens(32));
  s.add(2, tokens(32));
  step(s);  // both prefilled: 2 pages each, pool empty, both sampled a token (33 tokens each)
  EXPECT_EQ(s.pool().num_free(), 0);
  StepPlan p = step(s);  // seq 1 needs a 3rd page for position 32: seq 2 is preempted
  ASSERT_EQ(p.preempted, (std::vector<int64_t>{2}));
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq_id, 1);
  EXPECT_EQ(s.seq(2).num_computed, 0);
  EXPECT_EQ(s.seq(2).tokens.size(), 33u) << "recompute keeps the generated tokens";
  s.finish(1);
  EXPECT_EQ(s.pool().num_free(), 4);
  p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq_id, 2);
  EXPECT_EQ(p.chunks[0].num_tokens, 33) << "prompt and generated token recomputed together";
  EXPECT_TRUE(p.chunks[0].samples);
}

TEST(Scheduler, FinishFreesWaitingAndRunning) {
  Scheduler s({8, 1000}, 8, 16);
  s.add(1, tokens(20));
  s.add(2, tokens(20));
  step(s);
  s.add(3, tokens(5));
  s.finish(3);
  s.finish(1);
  s.finish(2);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.pool().num_free(), 8);
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

using testing::token_ramp;

TEST(SchedulerPrefixCache, ASharedPrefixIsComputedOnceAndTheLastPageAlways) {
  Scheduler s({8, 1000, true}, 64, 16);
  s.add(1, token_ramp(50, 0));  // pages 0-2 full, 2 tokens in page 3
  step(s);
  EXPECT_EQ(s.seq(1).num_cached, 0);
  // Same 48-token head: three cached pages, computing starts at 48.
  std::vector<int32_t> b = token_ramp(48, 0);
  b.insert(b.end(), {900, 901, 902, 903, 904});
  s.add(2, b);
  StepPlan p = step(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[1].seq_id, 2);
  EXPECT_EQ(p.chunks[1].start_pos, 48);
  EXPECT_EQ(p.chunks[1].num_tokens, 5);
  EXPECT_EQ(s.seq(2).num_cached, 48);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.seq(2).block_table[size_t(i)], s.seq(1).block_table[size_t(i)]);
  // A prompt that is exactly the cached pages recomputes its last page (its logits are needed).
  s.add(3, token_ramp(48, 0));
  p = step(s);
  EXPECT_EQ(p.chunks.back().seq_id, 3);
  EXPECT_EQ(p.chunks.back().start_pos, 32);
  EXPECT_EQ(p.chunks.back().num_tokens, 16);
  EXPECT_TRUE(p.chunks.back().samples);
  EXPECT_EQ(s.prefix_cache_stats().queries, 50 + 53 + 48);
  EXPECT_EQ(s.prefix_cache_stats().hits, 48 + 32);
  // A different salt shares nothing.
  s.add(4, token_ramp(50, 0), 77);
  p = step(s);
  EXPECT_EQ(p.chunks.back().seq_id, 4);
  EXPECT_EQ(p.chunks.back().start_pos, 0);
}

TEST(SchedulerPrefixCache, AFinishedConversationIsReusedByItsNextTurn) {
  Scheduler s({8, 1000, true}, 8, 16);
  s.add(1, token_ramp(40, 0));
  step(s);
  for (int i = 0; i < 30; ++i) step(s);  // decodes: 70 tokens known, 5 pages
  EXPECT_EQ(s.seq(1).registered_pages, 4) << "generated tokens fill and register pages too";
  std::vector<int32_t> turn2 = s.seq(1).tokens;  // an agent's next turn: the whole conversation, then more
  turn2.insert(turn2.end(), {500, 501, 502});
  s.finish(1);
  EXPECT_EQ(s.pool().num_free(), 8);
  s.add(2, turn2);
  StepPlan p = step(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start_pos, 64) << "the four full pages of the first turn are reused";
  EXPECT_EQ(s.seq(2).num_cached, 64);
}

TEST(SchedulerPrefixCache, APreemptedSequenceFindsItsSurvivingPages) {
  Scheduler s({8, 1000, true}, 6, 16);
  s.add(1, token_ramp(40, 0));
  step(s);
  s.add(2, token_ramp(40, 5000));  // three pages each: the pool is full
  StepPlan p;
  for (int i = 0; i < 20 && p.preempted.empty(); ++i) p = step(s);
  ASSERT_EQ(p.preempted, std::vector<int64_t>{2}) << "1 grows past its third page and preempts the newest";
  EXPECT_EQ(s.seq(2).num_computed, 0);
  s.finish(1);
  p = step(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq_id, 2);
  EXPECT_EQ(p.chunks[0].start_pos, 32) << "its two full prompt pages were left cached, not freed";
  EXPECT_EQ(s.seq(2).num_cached, 0) << "usage reports the first admission, which found nothing";
}

TEST(SchedulerPrefixCache, RequestsArrivingTogetherComputeTheirSharedPrefixOnce) {
  Scheduler s({8, 16, true}, 64, 16);  // a 16-token budget: the shared head takes three steps
  std::vector<int32_t> b = token_ramp(48, 0);
  b.insert(b.end(), {900, 901, 902, 903, 904});
  s.add(1, token_ramp(50, 0));
  s.add(2, b);
  s.add(3, token_ramp(20, 7000));  // unrelated, queued behind 2: first come, first served
  int64_t computed = 0;
  StepPlan p;
  for (int i = 0; i < 3; ++i) {
    p = step(s);
    for (const ScheduledChunk& c : p.chunks) {
      EXPECT_EQ(c.seq_id, 1) << "2 waits while 1 computes the pages it would share";
      computed += c.num_tokens;
    }
  }
  p = step(s);  // 1 finishes its prompt; 2 now finds the three pages cached (3 follows)
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(p.chunks[2].seq_id, 3);
  EXPECT_EQ(p.chunks[1].seq_id, 2);
  EXPECT_EQ(p.chunks[1].start_pos, 48);
  EXPECT_EQ(s.seq(2).num_cached, 48);
  EXPECT_EQ(computed + p.chunks[0].num_tokens + p.chunks[1].num_tokens, 50 + 5);
  // A request whose only shared page is its last (computed for its logits anyway) does not wait.
  Scheduler t({8, 1000, true}, 64, 16);
  t.add(1, token_ramp(32, 0));
  t.add(2, token_ramp(16, 0));
  EXPECT_EQ(step(t).chunks.size(), 2u);
}

TEST(SchedulerPrefixCache, EvictedPagesComeBackFromTheHostTier) {
  SchedulerOptions o{8, 1000, true};
  o.num_host_kv_pages = 16;
  Scheduler s(o, 4, 16);
  s.add(1, token_ramp(40, 0));  // two full pages
  step(s);
  s.finish(1);
  s.add(2, token_ramp(64, 5000));  // takes the whole pool: 1's pages spill
  step(s);
  std::vector<PageTransfer> t = s.take_transfers();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].to_host && t[1].to_host);
  s.finish(2);
  s.add(3, token_ramp(45, 0));
  const StepPlan p = step(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start_pos, 32) << "restored, not recomputed";
  EXPECT_EQ(s.seq(3).num_cached, 32);
  EXPECT_EQ(s.prefix_cache_stats().host_hits, 32);
  t = s.take_transfers();
  int restores = 0;
  for (const PageTransfer& x : t) restores += !x.to_host;
  EXPECT_EQ(restores, 2);
}

TEST(SchedulerPrefixCache, AKeptPromptOutlivesOtherTrafficAndCountsWhatItWrote) {
  Scheduler s({8, 1000, true}, 8, 16);
  s.set_clock(0);
  s.add(1, token_ramp(40, 0), 0, /*keep_seconds=*/300);
  step(s);
  EXPECT_EQ(s.seq(1).num_kept_written, 32) << "its two full prompt pages, kept";
  s.finish(1);
  s.add(2, token_ramp(40, 9000));  // unkept, released later than 1
  step(s);
  s.finish(2);
  s.set_clock(10);
  s.add(3, token_ramp(90, 5000));  // six pages: two of the cached ones must go
  step(s);
  s.finish(3);
  s.add(4, token_ramp(41, 0));
  step(s);
  EXPECT_EQ(s.seq(4).num_cached, 32) << "the kept prompt survived; 2's pages went instead";
  EXPECT_EQ(s.seq(4).num_kept_written, 0);
}

TEST(SchedulerPrefixCache, OffComputesEverything) {
  Scheduler s({8, 1000, false}, 64, 16);
  s.add(1, token_ramp(50, 0));
  step(s);
  s.add(2, token_ramp(50, 0));
  const StepPlan p = step(s);
  EXPECT_EQ(p.chunks.back().start_pos, 0);
  EXPECT_EQ(s.seq(2).num_cached, 0);
  EXPECT_EQ(s.prefix_cache_stats().queries, 0);
}

}  // namespace
}  // namespace m3
