// Regex front end: every supported construct, UTF-8 classes, nullable repetition, the JSON-string-body
// encoding, embedding in a larger grammar, and the refusals (each names its construct and offset).
#include "grammar/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "expect_error.h"
#include "grammar/matcher.h"

namespace m3::grammar {
namespace {

void expect_language(const std::string& pattern, const std::vector<std::string>& accepted,
                     const std::vector<std::string>& rejected) {
  const Grammar g = regex_grammar(pattern);
  for (const std::string& s : accepted)
    EXPECT_TRUE(matches(g, s)) << "/" << pattern << "/ should accept: " << s;
  for (const std::string& s : rejected)
    EXPECT_FALSE(matches(g, s)) << "/" << pattern << "/ should reject: " << s;
}

void expect_error(const std::string& pattern, const std::string& part) {
  expect_compile_error([](const std::string& s) { regex_grammar(s); }, pattern, part);
}

// The language of add_regex_json_string_body(pattern), as a whole grammar.
Grammar json_body_grammar(const std::string& pattern) {
  Grammar g;
  g.set_root(add_regex_json_string_body(g, pattern, "body").index);
  g.validate();
  return g;
}

TEST(RegexTest, LiteralsAndEscapes) {
  expect_language(R"(a\.b\\c\/d\-e\*)", {"a.b\\c/d-e*"}, {"aXb\\c/d-e*", "a.b\\c/d-e"});
  expect_language(R"(\n\t\r\f\v\0)", {std::string("\n\t\r\f\v\0", 6)}, {"ntrfv0"});
  expect_language(R"(\x41\u00e9\u{1F600}\uD83D\uDE00\U0001F600)",
                  {"A\xC3\xA9\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80"}, {"A"});
  expect_language("caf\xC3\xA9", {"caf\xC3\xA9"}, {"cafe", "caf\xC3"});
  expect_language(R"(a{b}c{)", {"a{b}c{"}, {"abc"});  // braces that are no quantifier are literal
  expect_language("", {""}, {"a"});
}

TEST(RegexTest, AnyCharacter) {
  expect_language(".", {"a", "\xC3\xA9", "\xF0\x9F\x98\x80", "\r"}, {"\n", "", "ab", "\xC3"});
}

TEST(RegexTest, CharacterClasses) {
  expect_language("[a-c_x]", {"a", "c", "_", "x"}, {"d", "", "ab"});
  expect_language("[^a-c\\n]", {"d", "\t", "\xC3\xA9"}, {"a", "\n", ""});
  expect_language(R"([\]\[\\.-])", {"]", "[", "\\", ".", "-"}, {"a"});
  expect_language(R"([-a][a-])", {"-a", "a-", "aa"}, {"b-"});
  expect_language(R"([\d-z])", {"5", "-", "z"}, {"a"});  // a class escape cannot bound a range
  expect_language(R"([\x41-\x43\u00e9])", {"A", "C", "\xC3\xA9"}, {"D"});
  expect_language(R"([^])", {"\n", "a"}, {""});
}

TEST(RegexTest, ShorthandClasses) {
  expect_language(R"(\d\w\s)", {"0a ", "9_\t", "5Z\n", "1z\v"},
                  {"aa ", "0- ", "0aa",
                   "\xD9\xA3"
                   "a "});
  expect_language(R"(\D\W\S)", {"a-x", "\xC3\xA9 \xC3\xA9"}, {"1-x", "aax", "a- "});
  expect_language(R"([\d\s]+)", {"1 2", "\t9"}, {"a"});
  expect_language(R"([^\d\s])", {"a", "\xC3\xA9"}, {"1", " "});
  expect_language(R"([\D])", {"a"}, {"7"});
}

TEST(RegexTest, Utf8Classes) {
  expect_language("[\xCE\xB1-\xCF\x89]", {"\xCE\xB2", "\xCF\x89"}, {"a", "\xCE\x91", "\xCE"});  // [α-ω]
  expect_language("[^a]", {"\xC3\xA9", "\xF0\x9F\x98\x80", "b", "\xE2\x82\xAC"},
                  {"a", "\xC3", "\xF0\x9F\x98", "", "\xED\xA0\x80"});
  expect_language("[\xE4\xB8\x80-\xE9\xBE\xA5]+", {"\xE4\xB8\xAD\xE6\x96\x87"}, {"a", "\xE4\xB8"});  // CJK
}

TEST(RegexTest, GroupsAndAlternation) {
  expect_language("ab|cd|", {"ab", "cd", ""}, {"abcd", "a"});
  expect_language("a(b|c)d", {"abd", "acd"}, {"ad", "abcd"});
  expect_language("(?:ab)+(?<x>c|d)(?P<y>e)", {"abce", "ababde"}, {"ce", "abe"});
  expect_language("((a|b)(c|))", {"a", "bc"}, {"c"});
}

TEST(RegexTest, Quantifiers) {
  expect_language("a*b+c?", {"b", "aabbb", "abc", "bc"}, {"", "a", "ac", "abcc"});
  expect_language("(ab){2}", {"abab"}, {"ab", "ababab"});
  expect_language("a{2,}", {"aa", "aaaaaa"}, {"a"});
  expect_language("a{1,3}b{,2}", {"a", "aaabb"}, {"", "aaaa", "abbb"});
  expect_language("a*?b+?c??d{1,2}?", {"bd", "aabbcdd"}, {"bcc"});  // laziness keeps the language
  expect_language("x{0}y", {"y"}, {"xy"});
  expect_language("[0-9]{100000}", {std::string(100000, '7')}, {std::string(99999, '7')});
}

TEST(RegexTest, AnchorsAreIgnored) {
  expect_language("^abc$", {"abc"}, {"xabc", "abcx"});
  expect_language("^a|^b$", {"a", "b"}, {"ab"});
  expect_language("(^a(b$|c$))", {"ab", "ac"}, {"abc"});
}

TEST(RegexTest, RepetitionOfNullableItems) {
  expect_language("(a?)*", {"", "a", "aaaa"}, {"b"});
  expect_language("(a*)*b", {"b", "aaab"}, {"", "aa"});
  expect_language("(a|)*", {"", "aaa"}, {"b"});
  expect_language("(a|b?)+", {"", "a", "abba"}, {"c"});
  expect_language("(a?b?){2,3}", {"", "ab", "ba", "abab", "ababab", "aaa"}, {"aaaa", "abababab"});
  expect_language("(()|(a?)*)+c", {"c", "aac"}, {"a"});
  expect_language("(){3,}x", {"x"}, {"xx"});
  expect_language("(a+)*(b+)+(c+){2,}", {"bcc", "aaabbbccc"},
                  {"", "bc", "ac"});  // runs of runs are flattened
  expect_language("(((a?)*)*)*x", {"x", "aaax"}, {"aa"});
}

TEST(RegexTest, JsonStringBody) {
  // The regex language is a"b\ (four characters); inside a JSON string it is written a\"b\\.
  const Grammar g = json_body_grammar(R"(a"b\\)");
  EXPECT_TRUE(matches(g, "a\\\"b\\\\"));
  EXPECT_FALSE(matches(g, "a\"b\\"));
  EXPECT_FALSE(matches(g, "a\\\"b\\"));

  const Grammar controls = json_body_grammar(R"([\x00-\x1f]\n)");
  for (const char* s : {"\\u0001\\n", "\\b\\n", "\\t\\n", "\\u001f\\n", "\\f\\n"})
    EXPECT_TRUE(matches(controls, s)) << s;
  for (const char* s : {"\x01\\n", "\\u0008\\n", "\\u001F\\n", "\\u0001\n", "\\/\\n"})
    EXPECT_FALSE(matches(controls, s)) << s;

  const Grammar any = json_body_grammar(".*");
  for (const char* s :
       {"", "plain", "caf\xC3\xA9", "\\\"quoted\\\"", "back\\\\slash", "tab\\t", "\xF0\x9F\x98\x80"})
    EXPECT_TRUE(matches(any, s)) << s;
  for (const char* s : {"\"", "\\", "tab\t", "\\n"}) EXPECT_FALSE(matches(any, s)) << s;  // . excludes \n

  const Grammar negated = json_body_grammar(R"([^a]{2})");
  EXPECT_TRUE(matches(negated, "\\\"\\\\"));
  EXPECT_TRUE(matches(negated, "\\u0000\\r"));
  EXPECT_FALSE(matches(negated, "ab"));
}

TEST(RegexTest, EmbeddedInAGrammar) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  Sequence seq = g.literal("\"");
  seq.push_back(add_regex_json_string_body(g, R"(\d{3}-"x")", "pattern"));
  seq.push_back(g.literal("\"")[0]);
  g.add_alternative(root, seq);
  g.add_alternative(root, {add_regex(g, "[a-z]+", "word")});
  g.set_root(root);
  g.validate();
  EXPECT_TRUE(matches(g, R"("123-\"x\"")"));
  EXPECT_TRUE(matches(g, "hello"));
  EXPECT_FALSE(matches(g, R"("123-"x"")"));
  EXPECT_FALSE(matches(g, R"("12-\"x\"")"));
  EXPECT_FALSE(matches(g, "Hello"));
}

TEST(RegexTest, Unsupported) {
  expect_error("abcd(?=x)", "lookahead (?=...) at offset 4 is not supported");
  expect_error("a(?!x)", "negative lookahead (?!...) at offset 1");
  expect_error("(?<=a)b", "lookbehind (?<=...) at offset 0");
  expect_error("(?<!a)b", "negative lookbehind (?<!...) at offset 0");
  expect_error("(a)\\1", "backreference \\1 at offset 3");
  expect_error("(?P<n>a)(?P=n)", "backreference (?P=name) at offset 8");
  expect_error("\\k<n>", "named backreference \\k");
  expect_error("a\\bc", "word boundary \\b at offset 1");
  expect_error("a\\B", "word boundary \\B");
  expect_error("(?i)abc", "inline flags or group (?i...) at offset 0");
  expect_error("a^b", "anchor ^ after the start of the pattern at offset 1");
  expect_error("a$b", "anchor $ before the end of the pattern at offset 1");
  expect_error("(a$)b", "anchor $ before the end of the pattern at offset 2");
  expect_error("\\p{L}", "Unicode property escape \\p");
  expect_error("\\Aa", "anchor \\A");
}

TEST(RegexTest, MalformedAndPathological) {
  expect_error(std::string(101, '(') + "a" + std::string(101, ')'), "nested deeper than 100");
  expect_error("a{100001}", "repetition bound exceeds 100000");
  expect_error("a{3,2}", "bad repetition bounds {3,2} at offset 1");
  expect_error("*a", "nothing to repeat");
  expect_error("a**", "follows another quantifier");
  expect_error("(ab", "unclosed '(' at offset 0");
  expect_error("ab)", "unbalanced ')' at offset 2");
  expect_error("[ab", "unterminated character class '[' at offset 0");
  expect_error("[]", "empty character class");
  expect_error("[z-a]", "bad character range z-a");
  expect_error("ab\\", "lone backslash");
  expect_error("\\q", "unknown escape \\q");
  expect_error("\\x4", "hex digits");
  expect_error("\\uD800", "lone surrogate");
  expect_error("a\xC3", "invalid UTF-8");
}

TEST(RegexTest, DumpNamesTheRegexRule) {
  EXPECT_EQ(regex_grammar("a[0-9]?").to_string(), "root ::= \"a\" root_opt\nroot_opt ::= [0-9] | \"\"\n");
}

}  // namespace
}  // namespace m3::grammar
