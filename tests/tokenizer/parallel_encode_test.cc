// Parallel encoding: long mixed texts give the same ids on any number of threads as on one; every cut point
// the rules allow leaves the ids unchanged, and the spots they refuse are ones where a cut would change them;
// the thread policy and M3_TOKENIZER_THREADS; the segment cache shared by both paths; invalid UTF-8 reported
// at the same byte; the worker pool under concurrent callers and throwing tasks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/error.h"
#include "test_util.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/json_loader.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace m3 {
namespace {

using Ids = std::vector<int32_t>;
using test::printable;

// The M3 tokenizer's normalizer, pre-tokenizer and added tokens on their own, for the cut-point functions.
struct M3Parts {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::AddedTokens added;
  static const M3Parts& get() {
    static const M3Parts parts = [] {
      tok::TokenizerJson file = tok::read_tokenizer_json(test::kM3TokenizerPath);
      M3Parts p;
      p.normalizer = tok::Normalizer::from_json(file.root["normalizer"], file.path);
      p.pre_tokenizer = tok::PreTokenizer::from_json(file.root["pre_tokenizer"], file.path);
      p.added = tok::AddedTokens::from_json(file.root["added_tokens"], file.path, p.normalizer);
      return p;
    }();
    return parts;
  }
};

// A tokenizer whose caches hold nothing yet, so that what is checked is computed, not remembered.
Tokenizer fresh_tokenizer() {
  return Tokenizer::load(test::kM3TokenizerPath);
}

// Fragments of the kinds of text a long prompt holds, with the awkward spots around possible cuts: newlines
// before '/', quotes, whitespace and combining marks; decomposed letters and Hangul jamo; whitespace runs;
// chat markers and other special tokens; code; digits; contractions; emoji (some newer than Unicode 14).
const std::vector<std::string>& fragments(bool with_newlines) {
  static const std::vector<std::string> kCommon = {
      "The quick brown fox jumps over the lazy dog. ",
      "I'm sure they'll say we've done it, isn't it? You'd think so. ",
      "ALLCAPS WORDS AND MixedCase WoRdS with CamelCaseIdentifiers and snake_case_names ",
      "Привет, мир! Как дела? ",
      "Ελληνικά κείμενα. ",
      "עברית. العربية. हिन्दी भाषा ภาษาไทย ",
      "日本語のテキストと中文文本混合。",
      "한국어 텍스트도 있습니다.",
      "漢字かな交じり文",
      "😀🚀👍🏽 👨\u200d👩\u200d👧\u200d👦 🇫🇷🇯🇵 \U0001FAE8 ",
      "3.14159 2,718 1e-5 -42 0x1F 12345678901234567890 ",
      "https://example.com/path?q=1&x=2#frag ",
      "{\"json\": [1, 2, {\"nested\": true}], \"s\": \"x\\\\ny\"} ",
      "$$\\int_0^\\infty e^{-x^2} dx$$ ",
      "caf\u0065\u0301 ",
      "e\u0301",
      "\u0301",
      "q\u0301\u0323",
      "\u1100\u1161",
      "\u1100\u1161\u11A8",
      "\u1100",
      "\u11A8",
      "n\u0303o ",
      "\u00A0",
      "\u3000",
      "\u200B",
      "    ",
      "\t\t",
      "'s",
      "'LL ",
      "!!!???...,,,;;;::: ",
      "a",
      " ",
      "/",
      "x/y/z ",
      "]~b]",
      "[e~[",
      "]~!b[",
      "<mm:think>",
      "</mm:think>",
      "]<]minimax[>[",
      "<tool_call>",
      "]~b",
      "[e~",
  };
  static const std::vector<std::string> kLines = {
      "\n",
      "\n\n\n",
      "\r\n",
      "   \n  \n",
      "\n/",
      "\n'",
      "\n\u0301",
      "\n\u00C9",
      "\ne\u0301",
      "\n\u1100\u1161",
      "\n ",
      ";\n",
      "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1)\n",
      "#include <vector>\nint main() { std::vector<int> v{1,2,3}; return v.size(); }\n",
      "if (a && b) {\n\tfoo(/* c */);\n}\n// done\n",
      "path/to/file.cc:42:7: error: expected ';'\n",
      "]~b]user\nhi[e~[\n]~b]ai\n",
  };
  static const std::vector<std::string> kAll = [] {
    std::vector<std::string> v = kCommon;
    v.insert(v.end(), kLines.begin(), kLines.end());
    return v;
  }();
  return with_newlines ? kAll : kCommon;
}

std::string mixed_text(size_t bytes, uint32_t seed, bool with_newlines = true) {
  const auto& parts = fragments(with_newlines);
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < bytes) {
    s += parts[rng() % parts.size()];
    if (rng() % 50 == 0) s += std::string(rng() % 400, rng() % 2 ? ' ' : '\n');  // long whitespace runs
  }
  return s;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ParallelEncode, ThreadPolicy) {
  using tok::encode_threads;
  EXPECT_EQ(encode_threads(0, 16), 1u);
  EXPECT_EQ(encode_threads(tok::kParallelMinBytes - 1, 16), 1u);
  EXPECT_EQ(encode_threads(tok::kParallelMinBytes, 16), tok::kParallelMinBytes / tok::kBytesPerThread);
  EXPECT_EQ(encode_threads(tok::kParallelMinBytes, 2), 2u);
  EXPECT_EQ(encode_threads(4'000'000, 16), 16u);
  EXPECT_EQ(encode_threads(4'000'000, 3), 3u);
  EXPECT_EQ(encode_threads(4'000'000, 1), 1u);
  EXPECT_EQ(encode_threads(4'000'000, 0), 1u);
  EXPECT_EQ(encode_threads(size_t{1} << 40, 100000), tok::kMaxEncodeThreads);

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const char* saved = std::getenv("M3_TOKENIZER_THREADS");
  const std::string restore = saved ? saved : "";
  unsetenv("M3_TOKENIZER_THREADS");
  EXPECT_EQ(tok::max_encode_threads(), std::min<size_t>(hw, tok::kMaxEncodeThreads));
  setenv("M3_TOKENIZER_THREADS", "3", 1);
  EXPECT_EQ(tok::max_encode_threads(), 3u);
  setenv("M3_TOKENIZER_THREADS", "1", 1);
  EXPECT_EQ(tok::max_encode_threads(), 1u);
  for (const char* many : {"100000", "99999999999999999999999"}) {
    setenv("M3_TOKENIZER_THREADS", many, 1);
    EXPECT_EQ(tok::max_encode_threads(), tok::kMaxEncodeThreads) << many;
  }
  for (const char* bad : {"0", "-2", "four", "4x", ""}) {
    setenv("M3_TOKENIZER_THREADS", bad, 1);
    EXPECT_EQ(tok::max_encode_threads(), std::min<size_t>(hw, tok::kMaxEncodeThreads)) << bad;
  }
  if (saved) {
    setenv("M3_TOKENIZER_THREADS", restore.c_str(), 1);
  } else {
    unsetenv("M3_TOKENIZER_THREADS");
  }
}

// Every cut the rules allow, checked on short texts (which encode on one thread): the ids of the two sides
// concatenate to the ids of the whole, with special tokens parsed and not.
TEST(ParallelEncode, EveryAllowedCutKeepsTheIds) {
  const Tokenizer& tok = test::m3_tokenizer();
  const M3Parts& parts = M3Parts::get();
  size_t cuts = 0, after_newline = 0, before_space = 0;
  for (uint32_t seed = 0; seed < 120; ++seed) {
    const std::string text = mixed_text(1500, seed, seed % 4 != 0);
    const Ids whole = tok.encode(text), whole_plain = tok.encode(text, false);
    for (size_t q = tok::next_cut(text, 0, parts.normalizer, parts.pre_tokenizer); q != std::string::npos;
         q = tok::next_cut(text, q + 1, parts.normalizer, parts.pre_tokenizer)) {
      ++cuts;
      after_newline += text[q - 1] == '\n';
      before_space += text[q] == ' ';
      const std::string a = text.substr(0, q), b = text.substr(q);
      ASSERT_EQ(concat(tok.encode(a), tok.encode(b)), whole)
          << "cut at " << q << ": " << printable(a.substr(a.size() - std::min<size_t>(a.size(), 20))) << " | "
          << printable(b, 20);
      ASSERT_EQ(concat(tok.encode(a, false), tok.encode(b, false)), whole_plain) << "cut at " << q;
    }
  }
  EXPECT_GT(cuts, 5000u);
  EXPECT_GT(after_newline, 500u);
  EXPECT_GT(before_space, 500u);
}

// Spots the rules refuse where a cut would change the ids, one per reason.
TEST(ParallelEncode, RefusedCutsWouldChangeTheIds) {
  const Tokenizer& tok = test::m3_tokenizer();
  const M3Parts& parts = M3Parts::get();
  const struct {
    std::string a, b, why;
  } cases[] = {
      {"abc\n", "\nxyz", "\\s*[\\r\\n]+ takes both newlines"},
      {"foo\n", "  \nbar", "\\s*[\\r\\n]+ takes the whitespace after the newline"},
      {"foo;\n", "/bar", "[\\r\\n/]* takes the slash after the newline"},
      {"x\r", "\ny", "a carriage return is no newline"},
      {"hello caf", "e\u0301 x", "the letter after the cut composes with the mark after it"},
      {"go 1", "23 x", "digits group by three"},
      {"abc", "def ", "inside a word"},
  };
  for (const auto& c : cases) {
    const std::string text = c.a + c.b;
    EXPECT_NE(tok::next_cut(text, c.a.size(), parts.normalizer, parts.pre_tokenizer), c.a.size()) << c.why;
    EXPECT_NE(concat(tok.encode(c.a), tok.encode(c.b)), tok.encode(text)) << c.why;
  }
  EXPECT_EQ(tok::next_cut("abc\nxyz", 1, parts.normalizer, parts.pre_tokenizer), 4u);
  EXPECT_EQ(tok::next_cut("abc xyz", 1, parts.normalizer, parts.pre_tokenizer), 3u);
}

// Normalization alone: between inert starters it splits cleanly; next to a code point that is not one it
// may not.
TEST(ParallelEncode, NormalizationSplitsBetweenInertStarters) {
  const tok::Normalizer& norm = M3Parts::get().normalizer;
  auto normalized = [&](std::string_view s) {
    std::string out;
    norm.normalize(s, out);
    return out;
  };
  for (char32_t cp = 0; cp < 0x80; ++cp) EXPECT_TRUE(norm.is_inert_starter(cp)) << static_cast<uint32_t>(cp);
  for (char32_t cp : {0x301, 0x323, 0x1161, 0x11A8, 0xC9, 0xAC00, 0x212B, 0x0F73}) {
    EXPECT_FALSE(norm.is_inert_starter(cp)) << static_cast<uint32_t>(cp);
  }
  size_t checked = 0;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const std::string text = mixed_text(1500, 500 + seed);
    const std::string whole = normalized(text);
    std::vector<std::pair<size_t, char32_t>> cps;  // offset, code point
    for (size_t i = 0; i < text.size();) {
      const size_t at = i;
      cps.emplace_back(at, tok::next_code_point(text, i));
    }
    for (size_t k = 1; k + 1 < cps.size(); ++k) {
      if (!norm.is_inert_starter(cps[k - 1].second) || !norm.is_inert_starter(cps[k].second) ||
          !norm.is_inert_starter(cps[k + 1].second)) {
        continue;
      }
      const size_t q = cps[k].first;
      ++checked;
      ASSERT_EQ(normalized(text.substr(0, q)) + normalized(text.substr(q)), whole) << "cut at " << q;
    }
  }
  EXPECT_GT(checked, 10000u);
  const std::pair<std::string, std::string> unsafe[] = {
      {"e", "\u0301"}, {"\u1100", "\u1161"}, {"a\u0301", "\u0323"}, {"\uAC00", "\u11A8"}};
  for (const auto& [a, b] : unsafe) EXPECT_NE(normalized(a) + normalized(b), normalized(a + b)) << a << b;
}

// Raw-stage added tokens: a cut is refused inside any marker, and the split of the two sides, joined at the
// cut, is the split of the whole.
TEST(ParallelEncode, AddedTokenCutsKeepTheSegments) {
  const tok::AddedTokens& added = M3Parts::get().added;
  using Seg = tok::AddedTokens::Segment;
  auto same = [](const std::vector<Seg>& x, const std::vector<Seg>& y) {
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](const Seg& s, const Seg& t) {
             return s.start == t.start && s.end == t.end && s.id == t.id;
           });
  };
  size_t refused = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const std::string text = mixed_text(800, 1000 + seed);
    for (bool parse_special : {true, false}) {
      std::vector<Seg> whole;
      added.split(text, tok::AddedTokens::Stage::kRaw, parse_special, whole);
      for (size_t q = 1; q < text.size(); ++q) {
        if (!added.splits_at(text, q, tok::AddedTokens::Stage::kRaw)) {
          ++refused;
          continue;
        }
        std::vector<Seg> joined, right;
        added.split(text.substr(0, q), tok::AddedTokens::Stage::kRaw, parse_special, joined);
        added.split(text.substr(q), tok::AddedTokens::Stage::kRaw, parse_special, right);
        for (Seg s : right) {
          s.start += q;
          s.end += q;
          if (s.id < 0 && !joined.empty() && joined.back().id < 0 && joined.back().end == s.start) {
            joined.back().end = s.end;
          } else {
            joined.push_back(s);
          }
        }
        ASSERT_TRUE(same(joined, whole)) << "cut at " << q << " of " << printable(text, 2000);
      }
    }
  }
  EXPECT_GT(refused, 500u);
  const std::string marker = "x]~b]y";
  for (size_t q = 2; q <= 4; ++q)
    EXPECT_FALSE(added.splits_at(marker, q, tok::AddedTokens::Stage::kRaw)) << q;
  EXPECT_TRUE(added.splits_at(marker, 1, tok::AddedTokens::Stage::kRaw));
  EXPECT_TRUE(added.splits_at(marker, 5, tok::AddedTokens::Stage::kRaw));
}

// The end-to-end property: long mixed texts, each thread count, special tokens parsed and not.
TEST(ParallelEncode, LongTextsMatchSingleThreaded) {
  const M3Parts& parts = M3Parts::get();
  std::vector<std::pair<std::string, std::string>> texts = {
      {"mixed, with newlines", mixed_text(600'000, 7)},
      {"one long line", mixed_text(400'000, 8, /*with_newlines=*/false)},
  };
  std::string cjk;  // no newline, no space: nowhere to cut, so one piece
  while (cjk.size() < 300'000) cjk += "日本語のテキストと中文文本混合。한국어";
  texts.emplace_back("CJK without a cut point", cjk);
  for (const auto& [name, text] : texts) {
    const size_t pieces =
        tok::cut_points(text, text.size() / 64, parts.normalizer, parts.pre_tokenizer).size();
    EXPECT_EQ(pieces > 1, name != "CJK without a cut point") << name << ": " << pieces << " pieces";
    for (bool parse_special : {true, false}) {
      const Ids expected = fresh_tokenizer().encode_with_threads(text, 1, parse_special);
      ASSERT_GT(expected.size(), text.size() / 8);
      for (size_t threads : {2, 3, 7, 16}) {
        ASSERT_GT(tok::encode_threads(text.size(), threads), 1u);
        EXPECT_EQ(fresh_tokenizer().encode_with_threads(text, threads, parse_special), expected)
            << name << ", " << threads << " threads, parse_special " << parse_special;
      }
    }
  }
}

// encode() itself follows M3_TOKENIZER_THREADS.
TEST(ParallelEncode, EncodeFollowsTheEnvironment) {
  const std::string text = mixed_text(400'000, 11);
  const Ids expected = fresh_tokenizer().encode_with_threads(text, 1);
  const char* saved = std::getenv("M3_TOKENIZER_THREADS");
  const std::string restore = saved ? saved : "";
  for (const char* n : {"1", "5"}) {
    setenv("M3_TOKENIZER_THREADS", n, 1);
    EXPECT_EQ(fresh_tokenizer().encode(text), expected) << n;
  }
  if (saved) {
    setenv("M3_TOKENIZER_THREADS", restore.c_str(), 1);
  } else {
    unsetenv("M3_TOKENIZER_THREADS");
  }
}

// Whichever path encoded a long segment first, the other takes it from the cache with the same ids.
TEST(ParallelEncode, SegmentCacheIsSharedByBothPaths) {
  const std::string body = mixed_text(600'000, 12, true);
  std::string plain;  // the body without chat markers: one segment, cut into pieces on the parallel path
  for (char c : body) plain += c == ']' || c == '[' || c == '<' ? '(' : c;
  for (const std::string& text : {plain, "]~b]user\n" + plain + "[e~[\n]~b]ai\n"}) {
    const Ids expected = fresh_tokenizer().encode_with_threads(text, 1);
    const Tokenizer parallel_first = fresh_tokenizer();
    EXPECT_EQ(parallel_first.encode_with_threads(text, 4), expected);
    EXPECT_EQ(parallel_first.segment_cache_hits(), 0u);
    EXPECT_EQ(parallel_first.encode_with_threads(text, 1), expected);
    EXPECT_EQ(parallel_first.segment_cache_hits(), 1u);
    EXPECT_EQ(parallel_first.encode_with_threads(text, 7), expected);
    EXPECT_EQ(parallel_first.segment_cache_hits(), 2u);
    const Tokenizer single_first = fresh_tokenizer();
    EXPECT_EQ(single_first.encode_with_threads(text, 1), expected);
    EXPECT_EQ(single_first.encode_with_threads(text, 3), expected);
    EXPECT_EQ(single_first.segment_cache_hits(), 1u);
  }
}

// Invalid UTF-8 anywhere in a long text, cut boundaries included, is reported at the same byte.
TEST(ParallelEncode, InvalidUtf8ReportedAtTheSameByte) {
  const std::string text = mixed_text(500'000, 13);
  const std::vector<size_t> cuts = tok::raw_cut_points(text, 28, M3Parts::get().added);
  ASSERT_GT(cuts.size(), 10u);
  std::vector<std::string> bad;
  for (size_t i = 1; i < cuts.size(); i += 3) {
    std::string s = text;
    s.insert(cuts[i], "\xE4\xB8");  // a sequence cut short by the ASCII byte the cut stands before
    bad.push_back(s);
    s = text;
    s[cuts[i]] = '\xFF';
    bad.push_back(s);
  }
  std::string two = text;  // two bad bytes in different parts: the first is reported
  two[cuts[9] + 5] = '\xC0';
  two[cuts[2] + 5] = '\xC0';
  bad.push_back(two);
  bad.push_back(text + "\xC3");
  bad.push_back("\xED\xA0\x80" + text);
  auto message = [](const Tokenizer& tok, const std::string& s, size_t threads) {
    try {
      tok.encode_with_threads(s, threads);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tokenizer& tok = test::m3_tokenizer();
  for (const std::string& s : bad) {
    const std::string expected = message(tok, s, 1);
    ASSERT_NE(expected, "no error");
    EXPECT_EQ(message(tok, s, 7), expected);
  }
}

// Many request threads encoding long texts at once share the pool and each get their own ids.
TEST(ParallelEncode, ConcurrentLongEncodes) {
  const std::vector<std::string> texts = {mixed_text(300'000, 21), mixed_text(450'000, 22)};
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(fresh_tokenizer().encode_with_threads(t, 1));
  const Tokenizer tok = fresh_tokenizer();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 3; ++round) {
        const size_t k = (c + round) % texts.size();
        if (tok.encode_with_threads(texts[k], 2 + c % 4, c % 2 == 0) !=
            (c % 2 == 0 ? expected[k] : tok.encode_with_threads(texts[k], 1, false))) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ParallelEncode, PoolRunsEveryTaskOnceAndRethrows) {
  std::vector<std::atomic<int>> runs(1000);
  tok::run_parallel(runs.size(), 7, [&](size_t i) { ++runs[i]; });
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << i;

  std::atomic<int> started{0};
  EXPECT_THROW(tok::run_parallel(200, 5,
                                 [&](size_t i) {
                                   ++started;
                                   if (i == 3) fail(ErrorKind::kInternal, "task 3");
                                 }),
               Error);
  EXPECT_GE(started.load(), 1);
  // The pool still works afterwards.
  std::atomic<size_t> sum{0};
  tok::run_parallel(100, 16, [&](size_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 4950u);
}

// A tokenizer with lstrip/rstrip/single_word and normalized added tokens never cuts, yet gives the same ids.
TEST(ParallelEncode, TokenizerWithoutCutRulesFallsBack) {
  const Tokenizer tiny = Tokenizer::load("tests/fixtures/tokenizer/tiny_added.json");
  std::string text;
  std::mt19937 rng(3);
  const char* words[] = {"a", "b", "abc", " ", "  ", "[L]", "[R]", "cc", "<s>", "<long>", "\xC3\xA9t\xC3\xA9",
                         "\n"};
  while (text.size() < 400'000) text += words[rng() % std::size(words)];
  EXPECT_EQ(tiny.encode_with_threads(text, 7), tiny.encode_with_threads(text, 1));
}

}  // namespace
}  // namespace m3
