// AsyncEngine: concurrent submitters each get exactly their own events, aborts free pages within a step,
// draining refuses new work, and the in-flight cap gives a clear error.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/error.h"
#include "engine/async_engine.h"
#include "support/model_fixtures.h"
#include "support/requests.h"

namespace m3::testing {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Engine> tiny_engine(int pages = 256) {
  return std::make_unique<Engine>(load_fixture("m3-tiny-msa", pages), EngineOptions{});
}

std::vector<int32_t> drain(RequestStream& s, FinishReason* finish) {
  std::vector<int32_t> out;
  TokenEvent ev;
  while (s.next(&ev, 10s)) {
    if (ev.token >= 0) out.push_back(ev.token);
    *finish = ev.finish;
  }
  return out;
}

TEST(AsyncEngine, ConcurrentSubmittersGetTheirOwnGreedyOutputs) {
  auto golden = load_golden("m3-tiny-msa");
  AsyncEngine engine(tiny_engine());
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> outputs(golden.size());
  for (size_t p = 0; p < golden.size(); ++p)
    threads.emplace_back([&, p] {
      auto stream = engine.submit(greedy(golden[p].prompt, golden[p].max_tokens));
      FinishReason f;
      outputs[p] = drain(*stream, &f);
      EXPECT_EQ(f, FinishReason::kLength);
    });
  for (auto& t : threads) t.join();
  for (size_t p = 0; p < golden.size(); ++p) {
    size_t clear = 0;
    while (clear < golden[p].steps.size() && golden[p].steps[clear].margin >= 1e-3f) ++clear;
    ASSERT_EQ(outputs[p].size(), golden[p].output.size());
    EXPECT_TRUE(std::equal(outputs[p].begin(), outputs[p].begin() + clear, golden[p].output.begin())) << p;
  }
  EXPECT_EQ(engine.in_flight(), 0u);
  EXPECT_EQ(engine.stats().kv_pages_free, engine.stats().kv_pages_total);
}

// A consumer may react to an event by calling back into the engine (the server's GenerationRun aborts its
// request from its destructor, which the listener can trigger when a client disconnects as the last token
// arrives): events are delivered without the engine's lock held, so this never deadlocks.
TEST(AsyncEngine, ListenersMayCallBackIntoTheEngine) {
  AsyncEngine engine(tiny_engine());
  std::atomic<int> calls{0};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto stream = engine.submit(greedy({1, 2, 3, 4 + i}, 6));
    const int64_t id = stream->id();
    stream->set_listener([&engine, &calls, id] {
      engine.abort(id);  // takes the engine's lock, as ~GenerationRun does
      (void)engine.stats();
      ++calls;
    });
    streams.push_back(stream);
  }
  for (auto& s : streams) {
    FinishReason f = FinishReason::kNone;
    drain(*s, &f);
    EXPECT_NE(f, FinishReason::kNone);
  }
  EXPECT_GT(calls.load(), 0);
  EXPECT_EQ(engine.in_flight(), 0u);
}

TEST(AsyncEngine, AbortFreesPagesAndEndsTheStream) {
  AsyncEngine engine(tiny_engine());
  // 2000 tokens take the tiny model seconds; the abort lands long before the request could finish.
  auto stream = engine.submit(greedy({1, 2, 3, 4, 5, 6, 7, 8, 9}, 2000));
  TokenEvent ev;
  ASSERT_TRUE(stream->next(&ev, 10s));  // it is running
  engine.abort(stream->id());
  FinishReason f = FinishReason::kNone;
  drain(*stream, &f);
  EXPECT_EQ(f, FinishReason::kAbort);
  EXPECT_EQ(engine.in_flight(), 0u);
  // The loop publishes stats after each step; wait for one with the pages back.
  for (int i = 0; i < 100 && engine.stats().kv_pages_free != engine.stats().kv_pages_total; ++i) {
    auto s = engine.submit(greedy({1}, 1));
    drain(*s, &f);
  }
  EXPECT_EQ(engine.stats().kv_pages_free, engine.stats().kv_pages_total);
}

TEST(AsyncEngine, ValidationDrainAndCapErrors) {
  AsyncEngine engine(tiny_engine(), AsyncEngineOptions{1});
  EXPECT_THROW(engine.submit(greedy({}, 4)), Error);
  auto first = engine.submit(greedy({1, 2}, 30));
  try {
    engine.submit(greedy({1, 2}, 3));
    ADD_FAILURE() << "the in-flight cap was not enforced";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  engine.begin_drain();
  FinishReason f;
  EXPECT_EQ(drain(*first, &f).size(), 30u) << "in-flight requests finish while draining";
  try {
    engine.submit(greedy({1, 2}, 3));
    ADD_FAILURE() << "draining must refuse new requests";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnavailable);
  }
}

}  // namespace
}  // namespace m3::testing
