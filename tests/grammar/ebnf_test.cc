// GBNF / EBNF front end: every syntax element, UTF-8 classes, repetition of nullable items, forward
// references and left recursion, a JSON grammar, the dump, and the errors (each names its construct).
#include "grammar/ebnf.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "expect_error.h"
#include "grammar/matcher.h"

namespace m3::grammar {
namespace {

void expect_language(const std::string& ebnf, const std::vector<std::string>& accepted,
                     const std::vector<std::string>& rejected) {
  const Grammar g = parse_ebnf(ebnf);
  for (const std::string& s : accepted) EXPECT_TRUE(matches(g, s)) << ebnf << "\nshould accept: " << s;
  for (const std::string& s : rejected) EXPECT_FALSE(matches(g, s)) << ebnf << "\nshould reject: " << s;
}

// parse_ebnf(text) throws kInvalidArgument whose message contains `part`.
void expect_error(const std::string& ebnf, const std::string& part) {
  expect_compile_error([](const std::string& s) { parse_ebnf(s); }, ebnf, part);
}

TEST(EbnfTest, StringLiteralsAndEscapes) {
  expect_language(R"(root ::= "ab" 'c\'d' "\"\\\n\r\t")", {"abc'd\"\\\n\r\t"},
                  {"", "abc'd", "abcd\"\\\n\r\t"});
  expect_language(R"(root ::= "\x41\u00e9\U0001F600\[\]")", {"A\xC3\xA9\xF0\x9F\x98\x80[]"}, {"A", "Ae"});
  expect_language(R"(root ::= "\uD83D\uDE00")", {"\xF0\x9F\x98\x80"}, {""});  // a UTF-16 pair
  expect_language("root ::= \"h\xC3\xA9\"", {"h\xC3\xA9"}, {"he", "h\xC3"});  // raw UTF-8 in the text
  expect_language(R"(root ::= "")", {""}, {"a"});
}

TEST(EbnfTest, AlternativesGroupsSequencesAndComments) {
  const std::string ebnf = R"(
# a comment line
root ::= "a" ( "b" | "c" "d" )   # trailing comment
         "e"
       | "x"
  | ( ("y") )
)";
  expect_language(ebnf, {"abe", "acde", "x", "y"}, {"ae", "abde", "xy", "", "abex"});
}

TEST(EbnfTest, CharacterClasses) {
  expect_language("root ::= [a-cx0-1]", {"a", "b", "c", "x", "0", "1"}, {"d", "2", "", "ab", "A"});
  expect_language("root ::= [^a-c\\n]", {"d", "A", "\t"}, {"a", "c", "\n", ""});
  expect_language(R"(root ::= [\]\[\\\-] [-z] [z-])", {"]-z", "[zz", "\\-z", "--z", "-z-"}, {"]az", "aaa"});
  expect_language(R"(root ::= [\x00-\x1F] [\u00e0-\u00ff])", {std::string("\x05\xC3\xA9", 3)},
                  {"\x05"
                   "e"});
}

TEST(EbnfTest, Utf8Classes) {
  expect_language("root ::= [\xCE\xB1-\xCF\x89]", {"\xCE\xB2", "\xCF\x89"},
                  {"a", "\xCE\x91", "\xCE"});  // [α-ω]
  expect_language("root ::= [^a]", {"\xC3\xA9", "\xF0\x9F\x98\x80", "b", "\xE2\x82\xAC"},
                  {"a", "\xC3", "\xF0\x9F\x98", "", "bb", "\xED\xA0\x80"});  // no lone byte, no surrogate
  expect_language(R"(root ::= [^"\\a-z])", {"A", "\xE4\xB8\xAD"}, {"\"", "\\", "q"});
}

TEST(EbnfTest, AnyCharacter) {
  expect_language("root ::= . \"!\"", {"a!", "\xC3\xA9!", "\xF0\x9F\x98\x80!", "\n!"}, {"!", "ab!", "\xC3!"});
}

TEST(EbnfTest, PostfixOperators) {
  expect_language(R"(root ::= "a"* "b"+ "c"?)", {"b", "aabbb", "abc", "bc"}, {"", "a", "ac", "abcc"});
  expect_language(R"(root ::= "ab"{2})", {"abab"}, {"ab", "ababab", ""});
  expect_language(R"(root ::= "a"{2,})", {"aa", "aaaaaaa"}, {"a", ""});
  expect_language(R"(root ::= "a"{1,3} "b"{ , 2 })", {"a", "aaab", "abb"}, {"", "aaaa", "abbb"});
  expect_language(R"(root ::= ("x" | "y") {0,2} "z")", {"z", "xyz", "yyz"}, {"xyxz"});
  expect_language(R"(root ::= "a"{0})", {""}, {"a"});
  expect_language(R"(root ::= "a"?*)", {"", "aaa"}, {"b"});  // stacked operators apply in turn
}

TEST(EbnfTest, RepetitionOfNullableItems) {
  expect_language(R"(root ::= ("a"?)*)", {"", "a", "aaaa"}, {"b", "ab"});
  expect_language(R"(root ::= ("a"*)* "b")", {"b", "aaab"}, {"", "aa"});
  expect_language(R"(root ::= ("a" | )*)", {"", "aaa"}, {"b"});
  expect_language(R"(root ::= ("a" | "b"?)+)", {"", "a", "abba"}, {"c", "abc"});
  // A nullable sequence: each piece is one of "", a, b, ab, so at most three of them.
  expect_language(R"(root ::= ("a"? "b"?){2,3})", {"", "ab", "ba", "abab", "ababab", "aaa"},
                  {"aaaa", "abababab", "bbbb"});
  expect_language(R"(root ::= ("")* "x" ("" "")+)", {"x"}, {"", "xx"});
  // Nullable through rule references, including a recursive one and one used before its definition.
  expect_language("root ::= item* \"!\"\nitem ::= \"x\"?", {"!", "xxx!"}, {"", "x"});
  expect_language("root ::= list+\nlist ::= \"\" | \"(\" list \")\" list", {"", "()", "(())()", "()()"},
                  {"(", ")(", "(()"});
  expect_language("root ::= e{2,5} \"x\"\ne ::= \"\"", {"x"}, {"", "xx"});
}

TEST(EbnfTest, ForwardReferencesAndRootChoice) {
  const std::string ebnf =
      "root ::= greeting \" \" name\nname ::= [A-Z] [a-z]*\ngreeting ::= \"hi\" | \"yo\"";
  expect_language(ebnf, {"hi Bob", "yo A"}, {"hi bob", "hi", "hey Bob"});
  const Grammar g = parse_ebnf(ebnf, "name");
  EXPECT_TRUE(matches(g, "Bob"));
  EXPECT_FALSE(matches(g, "hi Bob"));
  // Names may hold digits, '_', '-' and '.'.
  expect_language("root ::= a-b.c_1\na-b.c_1 ::= \"k\"", {"k"}, {""});
}

TEST(EbnfTest, LeftRecursiveArithmetic) {
  const std::string ebnf = R"g(
root   ::= expr
expr   ::= expr "+" term | expr "-" term | term
term   ::= term "*" factor | factor
factor ::= [0-9]+ | "(" expr ")"
)g";
  expect_language(ebnf, {"1", "1+2*3", "(1+2)*3", "12-3-4", "((7))", "2*(3+4)*5"},
                  {"", "1+", "+1", "(1", "1**2", "1+2)", "a"});
}

// A JSON grammar in the style of llama.cpp's grammars/json.gbnf.
const char* kJsonGbnf = R"gbnf(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws

# Optional space: after literal characters where allowed
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

TEST(EbnfTest, JsonGrammar) {
  expect_language(
      kJsonGbnf,
      {"{}", R"({"a":1})", R"({"a": [1, 2.5, -3e10, true, false, null], "b": {"c": "d\n\u00e9"}})",
       "{\n  \"k\": [ ],\n  \"s\": \"caf\xC3\xA9 \\\" \\\\ \\/\"\n}", R"({"x": {"y": {"z": []}}})"},
      {"", "[1]", R"({"a":})", R"({"a":1,})", R"({"a":01})", R"({"a":"\x"})", R"({"a": "open})",
       "{\"a\":\"\x01\"}", R"({a:1})", R"({"a":1}})", R"({"a":tru})"});
}

TEST(EbnfTest, ToString) {
  EXPECT_EQ(parse_ebnf("root ::= \"a\" b | \"\"\nb ::= [0-9]").to_string(),
            "root ::= \"a\" b | \"\"\nb ::= [0-9]\n");
  EXPECT_EQ(parse_ebnf("root ::= [a-z]+").to_string(),
            "root ::= root_rep\nroot_rep_item ::= [a-z]\nroot_rep ::= root_rep_item{1,}\n");
}

TEST(EbnfTest, Errors) {
  expect_error("root ::= value\nother ::= \"x\" valu\nvalue ::= \"v\"", "undefined rule 'valu' at 2:15");
  expect_error("start ::= \"x\"", "no rule named 'root'");
  expect_error("root ::= \"abc", "unterminated string at 1:10");
  expect_error("root ::= \"ab\nc\"", "unterminated string");
  expect_error("root ::= [abc", "unterminated character class at 1:10");
  expect_error("root ::= []", "empty character class");
  expect_error("root ::= [z-a]", "bad character range z-a");
  expect_error("root ::= \"a\"{3,2}", "bad repetition bounds {3,2} at 1:13");
  expect_error("root ::= \"a\"{}", "bad repetition bounds {}");
  expect_error("root ::= \"a\"{2", "unterminated repetition");
  expect_error("root ::= \"a\"{0,100001}", "repetition bound exceeds 100000");
  expect_error("root ::=\nx ::= \"a\"", "rule 'root' has an empty body");
  expect_error("root ::=", "rule 'root' has an empty body");
  expect_error("root ::= ( \"a\" ", "unclosed '(' at 1:10");
  expect_error("root ::= \"a\" )", "unbalanced ')' at 1:14");
  expect_error("root ::= * \"a\"", "nothing to repeat");
  expect_error("root ::= \"\\q\"", "unknown escape '\\q' at 1:11");
  expect_error("root ::= \"\\x4\"", "hex digits");
  expect_error("root ::= \"\\uD800\"", "lone surrogate");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice at 2:1");
  expect_error("root ::= \"a\" (= \"b\")", "lookahead assertion");
  expect_error("root \"a\"", "expected '::='");
  expect_error("root ::= \"a\" % \"b\"", "unexpected '%' at 1:14");
  expect_error("root ::= " + std::string(101, '(') + "\"a\"" + std::string(101, ')'),
               "nested deeper than 100");
  expect_error("root ::= root \"a\"", "finite string");
  expect_error("root ::= \"a\"" + std::string(101, '?'), "nested deeper than 100");
}

TEST(EbnfTest, ExpressionTreeHelpers) {
  EXPECT_EQ(normalize({{5, 9}, {1, 3}, {4, 4}, {20, 30}, {25, 26}}), (CodeRanges{{1, 9}, {20, 30}}));
  EXPECT_EQ(complement({{0, 9}, {20, 0x10FFFF}}), (CodeRanges{{10, 19}}));
  EXPECT_EQ(complement({}), (CodeRanges{{0, 0x10FFFF}}));
  size_t pos = 0;
  uint32_t cp = 0;
  const std::string text = "\xC3\xA9\xC0\x80";  // é, then an overlong encoding of NUL
  EXPECT_TRUE(next_code_point(text, &pos, &cp));
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_FALSE(next_code_point(text, &pos, &cp));
  EXPECT_EQ(pos, 2u);
}

}  // namespace
}  // namespace m3::grammar
