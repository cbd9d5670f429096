// Grammar construction: interning, repetitions, UTF-8 ranges, validation errors and the text dump.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "grammar/matcher.h"

namespace m3::grammar {
namespace {

Grammar single(const std::vector<Sequence>& alts, Grammar g = {}) {
  const int32_t root = g.add_rule("root");
  for (const Sequence& s : alts) g.add_alternative(root, s);
  g.set_root(root);
  g.validate();
  return g;
}

TEST(Grammar, ByteSetsAreInternedAndRulesNamedUniquely) {
  Grammar g;
  EXPECT_EQ(g.bytes(ByteSet::of('a')).index, g.bytes(ByteSet::of('a')).index);
  EXPECT_NE(g.bytes(ByteSet::of('a')).index, g.bytes(ByteSet::of('b')).index);
  const int32_t a = g.add_rule("x"), b = g.add_rule("x");
  EXPECT_NE(g.rule(a).name, g.rule(b).name);
  EXPECT_EQ(g.find_rule("x"), a);
  EXPECT_EQ(g.choice("c", {g.literal("ab")}).index, g.choice("c", {g.literal("ab")}).index);
}

TEST(Grammar, Utf8RangesMatchExactlyTheirCodePoints) {
  Grammar g;
  std::vector<Sequence> alts;
  g.utf8_range(0x7E, 0x10FFFF, &alts);
  g = single(alts, std::move(g));
  for (const char* ok : {"~", "\x7F", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
                         "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xCE\xB2"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"}", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xF5\x80\x80\x80", "\xC3", "\x80"})
    EXPECT_FALSE(matches(g, bad)) << bad;
  Grammar greek;
  std::vector<Sequence> ga;
  greek.utf8_range(0x3B1, 0x3C9, &ga);  // α-ω
  greek = single(ga, std::move(greek));
  EXPECT_TRUE(matches(greek, "\xCE\xB2"));
  EXPECT_FALSE(matches(greek, "a"));
  EXPECT_FALSE(matches(greek, "\xCE\x91"));  // Α
}

TEST(Grammar, RepeatBoundsAreExact) {
  Grammar g;
  const Symbol r = g.repeat("r", g.literal("ab"), 2, 4);
  g = single({{r}}, std::move(g));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "abab"));
  EXPECT_TRUE(matches(g, "ababab"));
  EXPECT_TRUE(matches(g, "abababab"));
  EXPECT_FALSE(matches(g, "ababababab"));
  EXPECT_FALSE(matches(g, "ababa"));
  Grammar big;
  const Symbol many = big.repeat("many", {big.bytes(ByteSet::range('a', 'z'))}, 0, 524288);
  big = single({{many}}, std::move(big));
  EXPECT_TRUE(matches(big, ""));
  EXPECT_TRUE(matches(big, std::string(5000, 'q')));
  Grammar small;
  const Sequence two{small.repeat("two", {small.bytes(ByteSet::range('a', 'z'))}, 0, 2),
                     small.bytes(ByteSet::of('!'))};
  small = single({two}, std::move(small));
  EXPECT_TRUE(matches(small, "ab!"));
  EXPECT_FALSE(matches(small, "abc!"));
}

TEST(Grammar, ValidateNamesTheBadRule) {
  Grammar empty;
  EXPECT_THROW(empty.validate(), Error);
  Grammar g;
  const int32_t root = g.add_rule("root");
  const int32_t loop = g.add_rule("loop");
  g.add_alternative(loop, {Grammar::ref(loop)});
  g.add_alternative(root, {Grammar::ref(loop)});
  g.set_root(root);
  try {
    g.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'loop'"), std::string::npos) << e.what();
  }
  Grammar nullable;
  const Symbol opt = nullable.optional("opt", nullable.literal("a"));
  const Symbol rep = nullable.star("rep", {opt});
  EXPECT_THROW(single({{rep}}, std::move(nullable)), Error);
}

TEST(Grammar, DumpIsGbnfLike) {
  Grammar g;
  const Symbol digits = g.plus("digits", {g.bytes(ByteSet::range('0', '9'))});
  const Sequence name = g.literal("n=");
  g = single({name, {digits}}, std::move(g));
  EXPECT_EQ(g.to_string(),
            "root ::= \"n\" \"=\" | digits\ndigits_item ::= [0-9]\ndigits ::= digits_item{1,}\n");
}

}  // namespace
}  // namespace m3::grammar
