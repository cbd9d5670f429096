// Pre-tokenizer steps. HF matches Split regexes with Oniguruma; PCRE2 agrees with it on the o200k pattern
// once `\s`/`\S` are spelled out as the White_Space set (PCRE2's own \s also accepts U+180E) and the general
// categories are brought to Unicode 16.0 (see unicode_compat.h).
#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/unicode_compat.h"
#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

// The Unicode White_Space property as a character-class body.
constexpr const char* kWhiteSpaceClass =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{"
    "3000}";

// The GPT-2 pattern HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// The o200k pattern (MiniMax-M3's Split regex), for which splits_between() knows word boundaries.
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Rewrites the escapes whose meaning depends on Unicode data so that PCRE2 answers as Oniguruma in HF does:
// \s and \S become the White_Space set, and \p{L}-style general categories gain the code points Unicode
// 15.0-16.0 added (PCRE2 has 14.0 tables). Escapes are consumed as units, so "\\s" (an escaped backslash,
// then s) is left alone. Negated forms inside a class (\S, \P{..}) have no class-body spelling and keep
// PCRE2's meaning.
std::string translate_pattern(const std::string& pattern, bool unicode16) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t class_start = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
        ++i;
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
        ++i;
      } else if (e == 'p' || e == 'P') {
        // \p{Name} or the one-letter form \pL.
        size_t end = i + 3;
        std::string name;
        if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
          size_t close = pattern.find('}', i + 3);
          end = close == std::string::npos ? pattern.size() : close + 1;
          name = pattern.substr(i + 3, end - 1 - (i + 3));
        } else if (i + 2 < pattern.size()) {
          name = pattern.substr(i + 2, 1);
        }
        end = std::min(end, pattern.size());
        const std::string original = pattern.substr(i, end - i);
        const std::string extra = unicode16 ? unicode16_additions(name) : std::string();
        if (extra.empty() || (e == 'P' && in_class)) {
          out += original;
        } else if (e == 'p') {
          out += in_class ? original + extra : "[" + original + extra + "]";
        } else {
          out += "[^\\p" + original.substr(2) + extra + "]";
        }
        i = end - 1;
      } else {
        out += c;
        out += e;
        ++i;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = out.size();
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // POSIX class such as [:alpha:] inside a bracket expression: copy through its closing ":]".
      size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']' && out.size() > class_start) in_class = false;
    out += c;
  }
  return out;
}

// Escapes a literal Split pattern ({"String": ...}) for PCRE2: every ASCII punctuation character gets a
// backslash, which PCRE2 always reads as the literal character.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != ' ' && c != '\t' && c != '\n' && c != '\r') out += '\\';
    out += c;
  }
  return out;
}

const std::string& string_field(const nlohmann::json& obj, const char* key, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    fail(ErrorKind::kCorruptData, what + " lacks string \"" + key + "\"");
  return it->get_ref<const std::string&>();
}

bool bool_field(const nlohmann::json& obj, const char* key, bool dflt, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail(ErrorKind::kCorruptData, what + ": \"" + key + "\" must be a boolean");
  return it->get<bool>();
}

}  // namespace

namespace {

void* compile_or_fail(const std::string& translated, const std::string& pattern, const std::string& what) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(ErrorKind::kUnsupported,
         what + ": cannot compile regex /" + pattern + "/: " + reinterpret_cast<const char*>(msg));
  }
  return code;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) : what_(what) {
  const std::string exact = translate_pattern(pattern, /*unicode16=*/true);
  const std::string plain = translate_pattern(pattern, /*unicode16=*/false);
  code_ = compile_or_fail(exact, pattern, what);
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
  // The long lists of Unicode 15-16 code points make PCRE2 several times slower, so text without any of
  // them is matched by the plain translation, which answers identically on such text.
  if (plain != exact) {
    fast_code_ = compile_or_fail(plain, pattern, what);
    fast_jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(fast_code_), PCRE2_JIT_COMPLETE) == 0;
  }
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
  pcre2_code_free(static_cast<pcre2_code*>(fast_code_));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  const bool use_fast = fast_code_ != nullptr && !contains_unicode16_addition(text);
  auto* code = static_cast<pcre2_code*>(use_fast ? fast_code_ : code_);
  const bool jit = use_fast ? fast_jit_ : jit_;
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t offset = 0;
  while (offset <= n) {
    // The text was validated (or produced by utf8proc), so PCRE2's own UTF check would only cost time.
    int rc = jit ? pcre2_jit_match(code, subject, n, offset, 0, md.get(), nullptr)
                 : pcre2_match(code, subject, n, offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      fail(ErrorKind::kResourceExhausted,
           what_ + ": regex matching failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (end == start) {
      // An empty match contributes nothing; resume after the next character.
      if (start >= n) break;
      offset = start + 1;
      while (offset < n && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    out.emplace_back(start, end);
    offset = end;
  }
}

void PreTokenizer::add_steps(const nlohmann::json& section, const std::string& path,
                             std::vector<Step>& steps) {
  if (section.is_null()) return;
  const std::string where = "tokenizer: " + path + ": pre_tokenizer";
  if (!section.is_object()) fail(ErrorKind::kCorruptData, where + " must be an object");
  const std::string& type = string_field(section, "type", where);
  if (type == "Sequence") {
    auto it = section.find("pretokenizers");
    if (it == section.end() || !it->is_array())
      fail(ErrorKind::kCorruptData, where + " Sequence lacks \"pretokenizers\"");
    for (const auto& child : *it) add_steps(child, path, steps);
  } else if (type == "Split") {
    Step step{Step::Kind::kSplit, nullptr};
    auto pat = section.find("pattern");
    if (pat == section.end() || !pat->is_object())
      fail(ErrorKind::kCorruptData, where + " Split lacks \"pattern\"");
    if (pat->contains("Regex")) {
      const std::string& regex = string_field(*pat, "Regex", where + " Split pattern");
      step.regex = std::make_shared<Regex>(regex, where + " Split");
      step.o200k = regex == kO200kPattern;
    } else if (pat->contains("String")) {
      step.regex = std::make_shared<Regex>(
          escape_literal(string_field(*pat, "String", where + " Split pattern")), where + " Split");
    } else {
      fail(ErrorKind::kCorruptData, where + " Split pattern must hold \"Regex\" or \"String\"");
    }
    const std::string& behavior = string_field(section, "behavior", where + " Split");
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      fail(ErrorKind::kUnsupported, where + " Split behavior \"" + behavior + "\" is not supported");
    }
    step.invert = bool_field(section, "invert", false, where + " Split");
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step{Step::Kind::kByteLevel, nullptr};
    step.add_prefix_space = bool_field(section, "add_prefix_space", true, where + " ByteLevel");
    if (bool_field(section, "use_regex", true, where + " ByteLevel")) {
      step.regex = std::make_shared<Regex>(kGpt2Pattern, where + " ByteLevel");
    }
    steps.push_back(std::move(step));
  } else {
    fail(ErrorKind::kUnsupported,
         where + ".type \"" + type + "\" is not supported (Sequence, Split, ByteLevel)");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& section, const std::string& path) {
  PreTokenizer p;
  add_steps(section, path, p.steps_);
  for (const Step& s : p.steps_) p.byte_level_ |= s.kind == Step::Kind::kByteLevel;
  p.o200k_first_ = !p.steps_.empty() && p.steps_[0].kind == Step::Kind::kSplit && p.steps_[0].o200k &&
                   p.steps_[0].behavior == Behavior::kIsolated;
  return p;
}

// Only the first step sees the whole text: every later step maps each piece on its own. So the claim holds
// when the first step's pieces for a + b are those of a followed by those of b. For an Isolated Split the
// pieces are the regex matches and the gaps between them, and every code point starts a match of the o200k
// pattern (letters and marks: the first two alternatives; numbers: the third; White_Space: the last; all
// else: ` ?[^\s\p{L}\p{N}]+`), so there are no gaps and the matches tile the text. find_all()'s only state
// between matches is the offset, and the pattern has no lookbehind or anchor, so matching b alone gives the
// matches of a + b from |a| on, provided one of them ends exactly at |a| and matching a alone finds the
// ones before. Both hold when the match holding `before` cannot go on through `at`, and reading `at` instead
// of the end of the subject changes no decision of the matcher:
// - before '\n', at neither White_Space nor '/': only ` ?[^\s\p{L}\p{N}]+[\r\n/]*`, `\s*[\r\n]+`,
//   `\s+(?!\S)` and `\s+` can take a '\n'. The first two stop at `at` as at the end ([\r\n/]*, \s* and
//   [\r\n]+ refuse it). The last two are tried only where `\s*[\r\n]+` failed, which it never does from
//   inside a White_Space run that reaches this '\n', so they never hold it.
// - before an ASCII letter, at ' ': only the first two alternatives can take a letter, and every item that
//   can follow one there (the letter/mark classes, the rest of a contraction such as 're) refuses a space
//   just as it refuses the end of the subject.
bool PreTokenizer::splits_between(char32_t before, char32_t at) const {
  if (!o200k_first_) return false;
  if (before == '\n') return at != '/' && !is_unicode_whitespace(at);
  const bool ascii_letter = (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z');
  return ascii_letter && at == ' ';
}

// Cuts `piece` at the regex matches and regroups the parts the way HF's SplitDelimiterBehavior does.
void PreTokenizer::apply_split(const Step& step, std::string_view piece, std::vector<std::string_view>& out) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  struct Part {
    size_t start, end;
    bool is_match;
  };
  thread_local std::vector<Part> parts;
  matches.clear();
  parts.clear();
  step.regex->find_all(piece, matches);
  size_t pos = 0;
  for (const auto& [s, e] : matches) {
    if (s > pos) parts.push_back({pos, s, step.invert});
    parts.push_back({s, e, !step.invert});
    pos = e;
  }
  if (pos < piece.size()) parts.push_back({pos, piece.size(), step.invert});

  thread_local std::vector<std::pair<size_t, size_t>> spans;
  spans.clear();
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) spans.emplace_back(p.start, p.end);
      }
      break;
    case Behavior::kIsolated:
      for (const Part& p : parts) spans.emplace_back(p.start, p.end);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !spans.empty()) {
          spans.back().second = p.end;
        } else {
          spans.emplace_back(p.start, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      // Mirror image of kMergedWithPrevious: walk right to left, then restore the order.
      bool next_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !next_match && !spans.empty()) {
          spans.back().first = it->start;
        } else {
          spans.emplace_back(it->start, it->end);
        }
        next_match = it->is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !spans.empty()) {
          spans.back().second = p.end;
        } else {
          spans.emplace_back(p.start, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
  }
  for (const auto& [s, e] : spans) {
    if (e > s) out.push_back(piece.substr(s, e - s));
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out,
                         std::deque<std::string>& storage) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (step.kind == Step::Kind::kByteLevel) {
        if (step.add_prefix_space && piece.front() != ' ') {
          storage.push_back(" " + std::string(piece));
          piece = storage.back();
        }
        if (step.regex) {
          apply_split(Step{Step::Kind::kSplit, step.regex, Behavior::kIsolated}, piece, next);
        } else {
          next.push_back(piece);
        }
      } else {
        apply_split(step, piece, next);
      }
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace m3::tok
