// ReasoningParser: the three generation-prompt suffixes (thinking enabled / disabled / adaptive), the
// consensus rules of serving-api.md §3.3, partial markers held across chunks, cut-off outputs, and linear
// cost.
#include <chrono>

#include "parser_test_util.h"

namespace m3::test {
namespace {

ReasoningResult parse(ThinkingStart s, std::string_view text) {
  return ReasoningParser(s).parse(text);
}

// Streams `chunks` and returns the concatenated result, checking nothing else.
ReasoningResult stream(ThinkingStart s, const std::vector<std::string_view>& chunks) {
  ReasoningParser p(s);
  std::string reasoning, content;
  for (auto c : chunks) {
    auto d = p.push(c);
    reasoning += d.reasoning;
    content += d.content;
  }
  auto d = p.finish();
  reasoning += d.reasoning;
  content += d.content;
  ReasoningResult r;
  if (!reasoning.empty()) r.reasoning = reasoning;
  r.content = content;
  return r;
}

constexpr auto kReasoning = ThinkingStart::kStartsInReasoning;
constexpr auto kContent = ThinkingStart::kStartsInContent;
constexpr auto kAdaptive = ThinkingStart::kAdaptive;

TEST(chat_parsers_ThinkingStart, FromGoldenRenderedPrompts) {
  // Rendered by HF transformers with the real template (tests/fixtures/minimax-m3/goldens.json). The system
  // prompt itself contains "<mm:think></mm:think>" (§2.2); only the generation suffix may decide.
  auto goldens = read_json("tests/fixtures/minimax-m3/goldens.json");
  int checked = 0;
  for (const auto& conv : goldens["conversations"]) {
    std::string rendered = conv["rendered"];
    ASSERT_NE(rendered.find("<mm:think></mm:think>"), std::string::npos);
    std::string mode;
    if (conv.contains("kwargs") && conv["kwargs"].contains("thinking_mode"))
      mode = conv["kwargs"]["thinking_mode"];
    ThinkingStart want = !conv["add_generation_prompt"].get<bool>() ? kContent
                         : mode == "enabled"                        ? kReasoning
                         : mode == "disabled"                       ? kContent
                                                                    : kAdaptive;
    EXPECT_EQ(infer_thinking_start(rendered), want) << rendered.substr(rendered.size() - 40);
    if (conv["add_generation_prompt"].get<bool>()) {
      EXPECT_EQ(thinking_start_for_mode(mode), want);
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(chat_parsers_ThinkingStart, SuffixesAndContinuations) {
  const std::string sys =
      "]~!b[]~b]system\nwrap your reasoning in <mm:think></mm:think> tags[e~[\n]~b]user\nHi[e~[\n";
  EXPECT_EQ(infer_thinking_start(sys + "]~b]ai\n<mm:think>"), kReasoning);
  EXPECT_EQ(infer_thinking_start(sys + "]~b]ai\n</mm:think>"), kContent);
  EXPECT_EQ(infer_thinking_start(sys + "]~b]ai\n"), kAdaptive);
  // continue_final_message: text after the marker does not change the state it left.
  EXPECT_EQ(infer_thinking_start(sys + "]~b]ai\n<mm:think>Let me see"), kReasoning);
  EXPECT_EQ(infer_thinking_start(sys + "]~b]ai\n<mm:think>R</mm:think>Partial answer"), kContent);
  // Raw completions prompts without any chat markup start in content (vLLM's default).
  EXPECT_EQ(infer_thinking_start("Once upon a time"), kContent);
  EXPECT_EQ(infer_thinking_start(""), kContent);
  EXPECT_EQ(thinking_start_for_mode("bogus"), kAdaptive);  // unknown mode renders no prefix (§2.4)
}

TEST(chat_parsers_Reasoning, EnabledStartsInsideReasoning) {
  auto r = parse(kReasoning, "Think about it.</mm:think>Answer.");
  EXPECT_EQ(r.reasoning, "Think about it.");
  EXPECT_EQ(r.content, "Answer.");
  // A redundant opener is dropped (§3.3 rule 3).
  r = parse(kReasoning, "<mm:think>Think.</mm:think>Answer.");
  EXPECT_EQ(r.reasoning, "Think.");
  EXPECT_EQ(r.content, "Answer.");
  // The model may skip thinking even when asked to: empty reasoning is reported as absent.
  r = parse(kReasoning, "</mm:think>Answer.");
  EXPECT_FALSE(r.reasoning.has_value());
  EXPECT_EQ(r.content, "Answer.");
}

TEST(chat_parsers_Reasoning, DisabledIsContentAndDropsStrayCloser) {
  auto r = parse(kContent, "Just the answer.");
  EXPECT_FALSE(r.reasoning.has_value());
  EXPECT_EQ(r.content, "Just the answer.");
  r = parse(kContent, "</mm:think>Just the answer.");
  EXPECT_EQ(r.content, "Just the answer.");
}

TEST(chat_parsers_Reasoning, AdaptiveEitherWay) {
  auto r = parse(kAdaptive, "<mm:think>Hard one.</mm:think>42");
  EXPECT_EQ(r.reasoning, "Hard one.");
  EXPECT_EQ(r.content, "42");
  r = parse(kAdaptive, "</mm:think>42");
  EXPECT_FALSE(r.reasoning.has_value());
  EXPECT_EQ(r.content, "42");
  r = parse(kAdaptive, "42");
  EXPECT_EQ(r.content, "42");
}

TEST(chat_parsers_Reasoning, GeneratedAfterRenderedPrompt) {
  // The parser follows the prompt the template rendered, not the request flag.
  auto goldens = read_json("tests/fixtures/minimax-m3/goldens.json");
  for (const auto& conv : goldens["conversations"]) {
    if (!conv["add_generation_prompt"].get<bool>()) continue;
    ThinkingStart s = infer_thinking_start(conv["rendered"].get<std::string>());
    auto r = parse(s, "Reasoning here.</mm:think>Final.");
    if (s == kReasoning) {
      EXPECT_EQ(r.reasoning, "Reasoning here.");
      EXPECT_EQ(r.content, "Final.");
    } else {
      EXPECT_FALSE(r.reasoning.has_value());
      EXPECT_EQ(r.content, "Reasoning here.Final.");
    }
  }
}

TEST(chat_parsers_Reasoning, ReentryAndMarkersNeverLeak) {
  auto r = parse(kAdaptive, "<mm:think>a<mm:think>b</mm:think>c</mm:think>d<mm:think>e</mm:think>f");
  EXPECT_EQ(r.reasoning, "abe");
  EXPECT_EQ(r.content, "cdf");
}

TEST(chat_parsers_Reasoning, LookalikesAreText) {
  auto r = parse(kReasoning, "a <b> <mm:thinking> </mm:thin k> <mm:think </mm:think>x < y <");
  EXPECT_EQ(r.reasoning, "a <b> <mm:thinking> </mm:thin k> <mm:think ");
  EXPECT_EQ(r.content, "x < y <");
}

TEST(chat_parsers_Reasoning, PartialMarkerIsHeldNotLeaked) {
  ReasoningParser p(kReasoning);
  auto d = p.push("step one </mm:");
  EXPECT_EQ(d.reasoning, "step one ");
  EXPECT_EQ(d.content, "");
  d = p.push("thi");
  EXPECT_TRUE(d.empty());
  d = p.push("nk>Answer <");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer ");
  EXPECT_FALSE(p.in_reasoning());
  d = p.push("b>");  // "<b>" cannot become a marker: released at once
  EXPECT_EQ(d.content, "<b>");
  d = p.finish();
  EXPECT_TRUE(d.empty());
}

TEST(chat_parsers_Reasoning, NonMarkerAngleBracketsAreNotDelayed) {
  ReasoningParser p(kContent);
  EXPECT_EQ(p.push("if a < b and c <= d").content, "if a < b and c <= d");
  EXPECT_EQ(p.push(" then <x").content, " then <x");
}

TEST(chat_parsers_Reasoning, CutOffMidMarkerGoesToCurrentState) {
  // Documented choice (vLLM §3.2): what is held at the end is flushed as the current state.
  auto r = parse(kReasoning, "nearly done </mm:thi");
  EXPECT_EQ(r.reasoning, "nearly done </mm:thi");
  EXPECT_EQ(r.content, "");
  r = parse(kAdaptive, "Answer <mm:th");
  EXPECT_EQ(r.content, "Answer <mm:th");
  ReasoningParser p(kReasoning);
  EXPECT_EQ(p.push("x</").reasoning, "x");
  EXPECT_EQ(p.finish().reasoning, "</");
}

TEST(chat_parsers_Reasoning, CutOffInsideReasoningKeepsItAllReasoning) {
  // §3.3 rule 5: a `length` finish inside reasoning leaves content empty.
  auto r = parse(kAdaptive, "<mm:think>Let me consider the cases: first");
  EXPECT_EQ(r.reasoning, "Let me consider the cases: first");
  EXPECT_EQ(r.content, "");
}

TEST(chat_parsers_Reasoning, ParseDoesNotDisturbStreaming) {
  ReasoningParser p(kReasoning);
  EXPECT_EQ(p.push("abc").reasoning, "abc");
  auto whole = p.parse("x</mm:think>y");
  EXPECT_EQ(whole.reasoning, "x");
  EXPECT_TRUE(p.in_reasoning());
  EXPECT_EQ(p.push("</mm:think>z").content, "z");
}

TEST(chat_parsers_Reasoning, PushAfterFinishIsIgnored) {
  ReasoningParser p(kContent);
  p.push("a");
  p.finish();
  EXPECT_TRUE(p.push("b").empty());
  EXPECT_TRUE(p.finish().empty());
}

TEST(chat_parsers_Reasoning, EverySplitOfTrickyInputs) {
  const char* inputs[] = {"<mm:think>a</mm:think>b", "</mm:think></mm:think><mm:think><mm:think>x",
                          "<<mm:think><</mm:think><", "a</mm:th</mm:think>b<mm:thin",
                          "<mm:think></mm:think>"};
  for (auto start : {kReasoning, kContent, kAdaptive}) {
    for (std::string_view in : inputs) {
      auto whole = parse(start, in);
      for (size_t i = 0; i <= in.size(); ++i) {
        for (size_t j = i; j <= in.size(); ++j) {
          auto s = stream(start, split_at(in, {i, j}));
          ASSERT_EQ(s.reasoning, whole.reasoning) << in << " @" << i << "," << j;
          ASSERT_EQ(s.content, whole.content) << in << " @" << i << "," << j;
        }
      }
    }
  }
}

TEST(chat_parsers_Reasoning, LongInputsStayLinear) {
  // 2 MB of marker prefixes fed byte by byte: quadratic work would take minutes.
  std::string text;
  while (text.size() < (2u << 20)) text += "</mm:thin<mm:thi<";
  auto t0 = std::chrono::steady_clock::now();
  ReasoningParser p(kReasoning);
  size_t out = 0;
  for (size_t i = 0; i < text.size(); ++i)
    out += p.push(std::string_view(text).substr(i, 1)).reasoning.size();
  out += p.finish().reasoning.size();
  EXPECT_EQ(out, text.size());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

}  // namespace
}  // namespace m3::test
