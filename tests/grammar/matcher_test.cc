// The Earley matcher: recursion of every kind, nullable rules, rollback, and the context parses token masks
// are built from (exits, FOLLOW sets, room a bounded repetition needs).
#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace m3::grammar {
namespace {

// expr ::= expr "+" term | term ; term ::= term "*" atom | atom ; atom ::= [0-9] | "(" expr ")"
Grammar arithmetic() {
  Grammar g;
  const int32_t expr = g.add_rule("expr"), term = g.add_rule("term"), atom = g.add_rule("atom");
  auto plus = g.literal("+"), times = g.literal("*");
  g.add_alternative(expr, {Grammar::ref(expr), plus[0], Grammar::ref(term)});
  g.add_alternative(expr, {Grammar::ref(term)});
  g.add_alternative(term, {Grammar::ref(term), times[0], Grammar::ref(atom)});
  g.add_alternative(term, {Grammar::ref(atom)});
  g.add_alternative(atom, {g.bytes(ByteSet::range('0', '9'))});
  g.add_alternative(atom, {g.literal("(")[0], Grammar::ref(expr), g.literal(")")[0]});
  g.set_root(expr);
  g.validate();
  return g;
}

TEST(Matcher, LeftRecursionAndNesting) {
  const Grammar g = arithmetic();
  for (const char* ok : {"1", "1+2", "1+2*3", "(1+2)*3", "((((1))))", "1*2*3+4*(5+6)"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"", "+", "1+", "(1", "1)", "12", "(1+2)(3)"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(Matcher, RightRecursionAndNullableRules) {
  Grammar g;
  const int32_t list = g.add_rule("list"), opt = g.add_rule("opt");
  g.add_alternative(opt, {});
  g.add_alternative(opt, g.literal("-"));
  g.add_alternative(list, {Grammar::ref(opt), g.literal("x")[0], Grammar::ref(opt), Grammar::ref(list)});
  g.add_alternative(list, {});
  g.set_root(list);
  g.validate();
  for (const char* ok : {"", "x", "-x", "x-", "-x-x", "xxx", "-x--x"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"-", "--x", "x---x"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(Matcher, RollbackRestoresTheState) {
  const Grammar g = arithmetic();
  Matcher m(g);
  ASSERT_TRUE(m.accept("(1+"));
  EXPECT_FALSE(m.accept("2)("));  // a group cannot follow a group
  EXPECT_EQ(m.num_bytes(), 3u);
  ASSERT_TRUE(m.accept("2)"));
  EXPECT_TRUE(m.can_finish());
  EXPECT_FALSE(m.accept_byte(')'));
  m.rollback(2);
  EXPECT_FALSE(m.can_finish());
  EXPECT_TRUE(m.next_bytes().has('3'));
  EXPECT_FALSE(m.next_bytes().has(')'));
  ASSERT_TRUE(m.accept("3)"));
  EXPECT_TRUE(m.can_finish());
}

// root ::= "[" item ("," item)* "]" ; item ::= "\"" [a-z]{0,3} "\""   (item shared by two callers)
struct Quoted {
  Grammar g;
  int32_t root = 0, item = 0;
  Quoted() {
    root = g.add_rule("root");
    item = g.add_rule("item");
    const Symbol q = g.literal("\"")[0];
    const Symbol chars = g.repeat("chars", {g.bytes(ByteSet::range('a', 'z'))}, 0, 3);
    g.add_alternative(item, {q, chars, q});
    Sequence more = g.literal(",");
    more.push_back(Grammar::ref(item));
    const Symbol rest = g.star("rest", more);
    g.add_alternative(root, {g.literal("[")[0], Grammar::ref(item), rest, g.literal("]")[0]});
    g.set_root(root);
    g.validate();
  }
};

TEST(Matcher, CountedRepetitionInsideAList) {
  Quoted q;
  EXPECT_TRUE(matches(q.g, "[\"\"]"));
  EXPECT_TRUE(matches(q.g, "[\"abc\",\"x\",\"\"]"));
  EXPECT_FALSE(matches(q.g, "[\"abcd\"]"));
  EXPECT_FALSE(matches(q.g, "[\"a\",]"));
}

// The scanning position of the character class inside `chars`.
int32_t char_position(const ParseTables& t) {
  for (int32_t p = 0; p < static_cast<int32_t>(t.positions.size()); ++p)
    if (t.positions[p].kind == ParseTables::kBytes && t.byte_sets[t.positions[p].index].has('q')) return p;
  return -1;
}

TEST(Matcher, ContextParseCountsRoomAndExitsAtSharedRules) {
  Quoted q;
  const auto tables = ParseTables::build(q.g);
  Matcher m(tables);
  const int32_t p = char_position(*tables);
  ASSERT_GE(p, 0);
  // Inside `chars` (bounded at 3), "ab" needs room for 2 more characters; the closing quote ends `item`,
  // which has two callers: an exit whose FOLLOW set is {',', ']'}.
  m.reset_to_position(p);
  ASSERT_TRUE(m.accept("ab"));
  EXPECT_EQ(m.min_need(), 2);
  ASSERT_TRUE(m.accept_byte('"'));
  EXPECT_TRUE(m.exit_follow(3).has(','));
  EXPECT_TRUE(m.exit_follow(3).has(']'));
  EXPECT_FALSE(m.exit_follow(3).has('a'));
  EXPECT_FALSE(m.accept_byte(','));  // what follows the exit is not known here
  // At run time the matched count is known: after ["ab the repetition holds 2 items.
  Matcher real(tables);
  ASSERT_TRUE(real.accept("[\"ab"));
  const auto scans = real.scans();
  ASSERT_EQ(scans.size(), 2u);  // another character, or the closing quote
  const auto chars =
      std::find_if(scans.begin(), scans.end(), [&](const Matcher::Scan& s) { return s.position == p; });
  ASSERT_NE(chars, scans.end());
  EXPECT_EQ(chars->repeat_count, 2);
}

TEST(Matcher, ContextParseReachesTheGrammarEnd) {
  Grammar g;
  const Symbol digits = g.plus("digits", {g.bytes(ByteSet::range('0', '9'))});
  const int32_t root = g.add_rule("root");
  g.add_alternative(root, {g.literal("n")[0], digits});
  g.set_root(root);
  g.validate();
  const auto tables = ParseTables::build(g);
  Matcher m(tables);
  int32_t p = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(tables->positions.size()); ++i)
    if (tables->positions[i].kind == ParseTables::kBytes &&
        tables->byte_sets[tables->positions[i].index].has('5'))
      p = i;
  m.reset_to_position(p);
  ASSERT_TRUE(m.accept("123"));
  EXPECT_TRUE(m.can_finish());
  EXPECT_TRUE(m.exit_follow(1).empty());
  EXPECT_EQ(m.min_need(), 0);  // unbounded: no room to count
}

}  // namespace
}  // namespace m3::grammar
