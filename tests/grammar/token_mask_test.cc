// Token masks against the exact per-token check: on random walks through grammars that exercise every
// precompute case (shared rules and their FOLLOW sets, bounded repetitions near their bound, left recursion,
// the grammar's end), the cached mask must equal what trying each token on the real parse gives.
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <random>

namespace m3::grammar {
namespace {

// A byte-level vocabulary like a BPE one: every single byte, then multi-byte pieces of the grammar's
// alphabet, some specials (no text unless allowed) and one stop id.
std::shared_ptr<const Vocabulary> test_vocab(const std::string& alphabet, int pieces, uint32_t seed,
                                             int32_t* stop) {
  std::vector<std::string> bytes;
  std::vector<char> special;
  for (int b = 0; b < 256; ++b) {
    bytes.push_back(std::string(1, static_cast<char>(b)));
    special.push_back(0);
  }
  std::mt19937 rng(seed);
  for (int i = 0; i < pieces; ++i) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
    special.push_back(0);
  }
  bytes.push_back("<tag>");  // a special with text
  special.push_back(1);
  bytes.push_back("");  // the stop id
  special.push_back(1);
  *stop = static_cast<int32_t>(bytes.size() - 1);
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                            std::vector<int32_t>{*stop});
}

// Walks `steps` random allowed tokens, checking the mask against allows() for every id at each state.
void check_walks(const Grammar& g, const std::string& alphabet, std::vector<int32_t> allowed_special = {}) {
  int32_t stop = -1;
  const auto vocab = test_vocab(alphabet, 1500, 7, &stop);
  const auto tg = TokenGrammar::compile(g, vocab, allowed_special, 2);
  std::mt19937 rng(11);
  std::vector<uint32_t> mask(vocab->words());
  int finished = 0, steps = 0;
  size_t multi_byte_allowed = 0;
  for (int walk = 0; walk < 12; ++walk) {
    Matcher m = tg->matcher();
    for (int step = 0; step < 40; ++step) {
      tg->fill_mask(m, mask.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool bit = (mask[id >> 5] >> (id & 31)) & 1;
        ASSERT_EQ(bit, tg->allows(m, id)) << "walk " << walk << " step " << step << " id " << id << " '"
                                          << vocab->bytes(id) << "' after " << m.num_bytes() << " bytes";
        if (bit) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "a dead end after " << m.num_bytes() << " bytes";
      ++steps;
      for (int32_t id : allowed) multi_byte_allowed += vocab->bytes(id).size() > 1;
      const int32_t pick = allowed[rng() % allowed.size()];
      if (pick == stop) {
        ++finished;
        break;
      }
      ASSERT_TRUE(m.accept(vocab->bytes(pick)));
    }
  }
  // The walks went somewhere: many states, multi-byte tokens allowed, some walks reaching the end, and both
  // halves of the cache in use.
  EXPECT_GT(steps, 100);
  EXPECT_GT(multi_byte_allowed, 200u);
  EXPECT_GT(finished, 0);
  EXPECT_GT(tg->stats().accepted, 0);
  EXPECT_GT(tg->stats().uncertain, 0);
}

// root ::= "[" item ("," item)* "]" ; item ::= "\"" [a-z]{0,5} "\"" | [0-9]{1,3} | "{" root "}"
Grammar nested_list() {
  Grammar g;
  const int32_t root = g.add_rule("root"), item = g.add_rule("item");
  const Sequence q = g.literal("\"");
  Sequence str = q;
  str.push_back(g.repeat("chars", {g.bytes(ByteSet::range('a', 'z'))}, 0, 5));
  str.push_back(q[0]);
  g.add_alternative(item, str);
  g.add_alternative(item, {g.repeat("digits", {g.bytes(ByteSet::range('0', '9'))}, 1, 3)});
  g.add_alternative(item, {g.literal("{")[0], Grammar::ref(root), g.literal("}")[0]});
  Sequence more = g.literal(",");
  more.push_back(Grammar::ref(item));
  g.add_alternative(root, {g.literal("[")[0], Grammar::ref(item), g.star("rest", more), g.literal("]")[0]});
  g.set_root(root);
  return g;
}

TEST(TokenMask, MatchesTheExactCheckOnNestedLists) {
  check_walks(nested_list(), "[]{},\"abz019");
}

TEST(TokenMask, MatchesTheExactCheckWithLeftRecursionAndSpecials) {
  Grammar g;
  const int32_t expr = g.add_rule("expr"), atom = g.add_rule("atom");
  g.add_alternative(expr, {Grammar::ref(expr), g.literal("+")[0], Grammar::ref(atom)});
  g.add_alternative(expr, {Grammar::ref(atom)});
  g.add_alternative(atom, {g.repeat("num", {g.bytes(ByteSet::range('0', '9'))}, 1, 4)});
  Sequence tagged = g.literal("<tag>");
  tagged.push_back(Grammar::ref(expr));
  g.add_alternative(atom, tagged);
  g.set_root(expr);
  int32_t stop = -1;
  const auto vocab = test_vocab("0123+<tag>", 10, 1, &stop);
  check_walks(g, "0123+<tag>", {static_cast<int32_t>(vocab->size() - 2)});
}

TEST(TokenMask, SpecialTokensNeedPermission) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  g.add_alternative(root, g.literal("<tag>"));
  g.set_root(root);
  int32_t stop = -1;
  const auto vocab = test_vocab("x", 0, 1, &stop);
  const int32_t tag = vocab->size() - 2;
  std::vector<uint32_t> mask(vocab->words());
  for (bool allow : {false, true}) {
    const auto tg =
        TokenGrammar::compile(g, vocab, allow ? std::vector<int32_t>{tag} : std::vector<int32_t>{});
    Matcher m = tg->matcher();
    tg->fill_mask(m, mask.data());
    EXPECT_EQ(((mask[tag >> 5] >> (tag & 31)) & 1) != 0, allow);
    EXPECT_TRUE((mask['<' >> 5] >> ('<' & 31)) & 1);
  }
}

}  // namespace
}  // namespace m3::grammar
