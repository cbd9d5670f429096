// The tokenizer.json "pre_tokenizer" section: Split (regex or literal, all five HF behaviours, invert),
// ByteLevel (add_prefix_space, use_regex) and Sequence of those; other types fail at load with
// kUnsupported. Regexes are compiled once (PCRE2, UTF + Unicode properties, JIT when available) and matched
// with Oniguruma semantics: `\s` means the Unicode White_Space property, as in HF's onig-backed build.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

class Regex {
 public:
  // `what` names the pattern's origin (file and section) in error messages.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) of every non-empty, non-overlapping match in `text` (valid UTF-8), left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* code_ = nullptr;       // pcre2_code_8*, kept opaque so users of this header need no PCRE2 macros
  void* fast_code_ = nullptr;  // same pattern without the Unicode 15-16 additions, or null if identical
  bool jit_ = false;
  bool fast_jit_ = false;
  std::string what_;
};

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& section, const std::string& path);

  // True when words reach the model as raw bytes (a ByteLevel step is present).
  bool byte_level() const { return byte_level_; }

  // Splits `text` into words, appended to `out`. Words either point into `text` or, when a step had to
  // rewrite them (ByteLevel's add_prefix_space), into strings appended to `storage`.
  void split(std::string_view text, std::vector<std::string_view>& out,
             std::deque<std::string>& storage) const;

  // Whether split(a + b) == split(a) followed by split(b) for every a ending in code point `before` and b
  // starting with `at`. True only for pairs the first step's pattern is known to end a word between (the
  // o200k pattern, see the .cc); false for every pair under any other first step.
  bool splits_between(char32_t before, char32_t at) const;

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind;
    std::shared_ptr<const Regex> regex;  // Split pattern, or ByteLevel's GPT-2 regex when use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
    bool o200k = false;  // a Split whose regex is exactly kO200kPattern
  };

  static void add_steps(const nlohmann::json& section, const std::string& path, std::vector<Step>& steps);
  static void apply_split(const Step& step, std::string_view piece, std::vector<std::string_view>& out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool o200k_first_ = false;  // steps_[0] is an Isolated Split with exactly kO200kPattern
};

}  // namespace m3::tok
