// ScriptedBackend: each sequence replays the output of the first rule matching its decoded prompt, then EOS,
// whatever the batching and chunking; page reuse (start_pos 0) starts a new sequence; special tokens in the
// script are single ids; bad scripts fail with errors naming the file.
#include "model/scripted_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kEos = 200020;

// A model directory holding only config.json (a tiny fixture's, with the real vocabulary and EOS) and the
// real tokenizer.json: all the scripted backend reads.
class ScriptedBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("m3-scripted-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ifstream in(fixture_model_dir("m3-tiny-msa") + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["text_config"]["vocab_size"] = 200064;
    config["text_config"]["eos_token_id"] = kEos;
    std::ofstream(dir_ / "config.json") << config.dump();
    fs::copy_file("tests/fixtures/minimax-m3/tokenizer.json", dir_ / "tokenizer.json");
    tok_ = Tokenizer::load((dir_ / "tokenizer.json").string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_script(const nlohmann::json& script) {
    const std::string path = (dir_ / "script.json").string();
    std::ofstream(path) << script.dump();
    return path;
  }
  std::unique_ptr<ModelBackend> load(const nlohmann::json& script, int pages = 64) {
    BackendOptions o;
    o.device = "scripted";
    o.num_kv_pages = pages;
    o.script = write_script(script);
    return load_backend(dir_.string(), o);
  }
  std::vector<int32_t> ids(const std::string& text) const { return tok_.encode(text, true); }

  fs::path dir_;
  Tokenizer tok_ = Tokenizer::load("tests/fixtures/minimax-m3/tokenizer.json");
};

int32_t argmax(const float* row, int vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// Drives the backend as the engine does: each sequence owns pages, chunks continue at its length, and only
// a chunk that ends the sequence's known tokens asks for logits.
class Driver {
 public:
  explicit Driver(ModelBackend& m) : m_(m) {}
  int add() {
    seqs_.emplace_back();
    return static_cast<int>(seqs_.size()) - 1;
  }
  struct Work {
    int seq;
    std::vector<int32_t> tokens;
    bool want_logits;
  };
  // Returns the argmax of each logits row, in work order (-1 for chunks without logits).
  std::vector<int32_t> step(const std::vector<Work>& work) {
    const int page = m_.page_size();
    ForwardBatch batch;
    for (const Work& w : work) {
      Seq& s = seqs_.at(w.seq);
      while (static_cast<int64_t>(s.pages.size()) * page < s.len + static_cast<int64_t>(w.tokens.size()))
        s.pages.push_back(next_page_++);
    }
    for (const Work& w : work) {
      Seq& s = seqs_.at(w.seq);
      SeqChunk c;
      c.token_offset = static_cast<int32_t>(batch.token_ids.size());
      c.num_tokens = static_cast<int32_t>(w.tokens.size());
      c.start_pos = s.len;
      c.block_table = s.pages;
      c.want_logits = w.want_logits;
      c.seq_id = id_base_ + w.seq;  // engine ids are never reused, also across drivers of one backend
      batch.token_ids.insert(batch.token_ids.end(), w.tokens.begin(), w.tokens.end());
      batch.seqs.push_back(c);
      s.len += static_cast<int64_t>(w.tokens.size());
    }
    ForwardOutput out = m_.forward(batch);
    std::vector<int32_t> next;
    size_t row = 0;
    for (const Work& w : work)
      next.push_back(w.want_logits ? argmax(out.logits.data() + (row++) * out.vocab, out.vocab) : -1);
    EXPECT_EQ(row * out.vocab, out.logits.size());
    return next;
  }

 private:
  struct Seq {
    std::vector<int32_t> pages;
    int64_t len = 0;
  };
  ModelBackend& m_;
  std::vector<Seq> seqs_;
  int32_t next_page_ = 0;
  static inline int64_t next_base_ = 0;
  int64_t id_base_ = (next_base_ += 1000);
};

// Greedy decode of `steps` tokens for one sequence after its prompt was fed in chunks of `chunk` tokens.
std::vector<int32_t> run(ModelBackend& m, const std::vector<int32_t>& prompt, size_t chunk, int steps) {
  Driver d(m);
  const int s = d.add();
  int32_t next = -1;
  for (size_t at = 0; at < prompt.size(); at += chunk) {
    const size_t end = std::min(prompt.size(), at + chunk);
    next = d.step(
        {{s, std::vector<int32_t>(prompt.begin() + at, prompt.begin() + end), end == prompt.size()}})[0];
  }
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(next);
    next = d.step({{s, {next}, true}})[0];
  }
  return out;
}

TEST_F(ScriptedBackendTest, EmitsTheMatchingOutputThenEosWhateverTheChunking) {
  auto m = load(nlohmann::json::array(
      {{{"match", "weather"}, {"output", "It is sunny."}}, {{"match", ""}, {"output", "Hello there!"}}}));
  EXPECT_STREQ(m->device_name(), "scripted");
  EXPECT_EQ(m->num_kv_pages(), 64);
  const std::vector<int32_t> prompt = ids("What is the weather in Paris today? Please answer briefly.");
  std::vector<int32_t> want = ids("It is sunny.");
  want.insert(want.end(), 3, kEos);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{8}, prompt.size()})
    EXPECT_EQ(run(*m, prompt, chunk, static_cast<int>(want.size())), want) << "chunk " << chunk;
  std::vector<int32_t> other = ids("Hello there!");
  other.push_back(kEos);
  EXPECT_EQ(run(*m, ids("Say hi"), 2, static_cast<int>(other.size())), other);
}

TEST_F(ScriptedBackendTest, LogitsAreZeroForTheScriptedIdAndVeryNegativeElsewhere) {
  auto m = load(nlohmann::json::array({{{"output", "x"}}}));
  ForwardBatch batch;
  batch.token_ids = ids("anything");
  const std::vector<int32_t> pages = {3}, other_pages = {5};
  SeqChunk c;
  c.num_tokens = static_cast<int32_t>(batch.token_ids.size());
  c.block_table = pages;
  c.want_logits = true;
  batch.seqs = {c, c};  // the second chunk asks for no logits: one row in all
  batch.seqs[1].want_logits = false;
  batch.seqs[1].block_table = other_pages;
  ForwardOutput out = m->forward(batch);
  ASSERT_EQ(out.vocab, 200064);
  ASSERT_EQ(out.logits.size(), 200064u);
  const std::vector<float>& row = out.logits;
  const int32_t x = ids("x")[0];
  EXPECT_EQ(row[x], 0.f);
  for (size_t i = 0; i < row.size(); ++i) {
    if (static_cast<int32_t>(i) != x) {
      ASSERT_LE(row[i], -1e8f) << i;
    }
  }
}

TEST_F(ScriptedBackendTest, FirstMatchWinsAndNoMatchMeansEos) {
  auto m = load(nlohmann::json::array(
      {{{"match", "alpha"}, {"output", "A"}}, {{"match", "alpha beta"}, {"output", "B"}}}));
  EXPECT_EQ(run(*m, ids("alpha beta"), 4, 2), (std::vector<int32_t>{ids("A")[0], kEos}));
  EXPECT_EQ(run(*m, ids("gamma"), 4, 2), (std::vector<int32_t>{kEos, kEos}));
}

TEST_F(ScriptedBackendTest, SpecialTokensInTheScriptAreSingleIds) {
  auto m = load(nlohmann::json::array({{{"output", "<mm:think>r</mm:think>c"}}}));
  const std::vector<int32_t> out = run(*m, ids("q"), 1, 5);
  EXPECT_EQ(out.front(), 200059);
  EXPECT_EQ(out.back(), kEos);
  EXPECT_EQ(tok_.decode(out, /*skip_special_tokens=*/false), "<mm:think>r</mm:think>c[e~[");
}

TEST_F(ScriptedBackendTest, BatchedSequencesWithMixedPrefillAndDecodeKeepTheirOwnScripts) {
  auto m = load(nlohmann::json::array(
      {{{"match", "one"}, {"output", "first answer"}}, {{"match", "two"}, {"output", "second reply here"}}}));
  Driver d(*m);
  const int a = d.add(), b = d.add();
  const std::vector<int32_t> pa = ids("prompt one"), pb = ids("a much longer prompt number two, in chunks");
  std::vector<int32_t> wa = ids("first answer"), wb = ids("second reply here");
  wa.push_back(kEos);
  wb.push_back(kEos);
  // a is prefilled whole while b is prefilled in 4-token chunks alongside a's decode steps.
  std::vector<int32_t> got_a, got_b;
  int32_t next_a = d.step({{a, pa, true}})[0], next_b = -1;
  size_t fed_b = 0;
  for (int guard = 0; guard < 100 && (got_a.size() < wa.size() || got_b.size() < wb.size()); ++guard) {
    std::vector<Driver::Work> work;
    if (got_a.size() < wa.size()) {
      got_a.push_back(next_a);
      work.push_back({a, {next_a}, true});
    }
    if (fed_b < pb.size()) {
      const size_t n = std::min<size_t>(4, pb.size() - fed_b);
      work.push_back(
          {b, std::vector<int32_t>(pb.begin() + fed_b, pb.begin() + fed_b + n), fed_b + n == pb.size()});
      fed_b += n;
    } else if (got_b.size() < wb.size()) {
      got_b.push_back(next_b);
      work.push_back({b, {next_b}, true});
    }
    const auto next = d.step(work);
    for (size_t i = 0; i < work.size(); ++i)
      if (next[i] >= 0) (work[i].seq == a ? next_a : next_b) = next[i];
  }
  EXPECT_EQ(got_a, wa);
  EXPECT_EQ(got_b, wb);
}

TEST_F(ScriptedBackendTest, SequencesAreKnownByIdAndReadPagesOthersWrote) {
  auto m = load(nlohmann::json::array({{{"match", "zebra"}, {"output", "stripes"}},
                                       {{"match", "cat"}, {"output", "meow meow"}},
                                       {{"match", "dog"}, {"output", "woof"}}}));
  auto forward = [&](const std::vector<int32_t>& tokens, int64_t start, int64_t id,
                     const std::vector<int32_t>& pages) {
    ForwardBatch batch;
    batch.token_ids = tokens;
    SeqChunk c;
    c.num_tokens = static_cast<int32_t>(tokens.size());
    c.start_pos = start;
    c.block_table = pages;
    c.want_logits = true;
    c.seq_id = id;
    batch.seqs.push_back(c);
    ForwardOutput out = m->forward(batch);
    return static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
  };
  const std::vector<int32_t> cat = ids("cat"), pages = {0};
  const int32_t first = forward(cat, 0, 1, pages);
  EXPECT_EQ(first, ids("meow meow")[0]);
  EXPECT_EQ(forward({first}, static_cast<int64_t>(cat.size()), 1, pages), ids("meow meow")[1]);
  EXPECT_EQ(forward(ids("dog"), 0, 2, pages), ids("woof")[0]);  // the page reused by a new sequence
  // A prefix-cached sequence: page 0 (written by sequence 3) is shared and only page 1 is fed; the prompt
  // the rule sees is read back from both pages, so the "zebra" of page 0 decides.
  const int P = m->page_size();
  std::vector<int32_t> prompt = ids("zebra");
  prompt.resize(size_t(P), ids(" ")[0]);
  forward(prompt, 0, 3, pages);
  EXPECT_EQ(forward(ids(" cat"), P, 4, {0, 1}), ids("stripes")[0]);
}

TEST_F(ScriptedBackendTest, BadScriptsFailNamingTheFile) {
  try {
    load(nlohmann::json::object({{"match", "x"}}));
    FAIL() << "a script that is not a list was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_NE(std::string(e.what()).find("script.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load(nlohmann::json::array({{{"match", "x"}}})), Error);                 // no output
  EXPECT_THROW(load(nlohmann::json::array({{{"match", 3}, {"output", "y"}}})), Error);  // bad match
  BackendOptions o;
  o.device = "scripted";
  o.num_kv_pages = 4;
  o.script = (dir_ / "missing.json").string();
  try {
    load_backend(dir_.string(), o);
    FAIL() << "a missing script was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
}

}  // namespace
}  // namespace m3::testing
