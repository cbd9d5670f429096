// The tokenizer.json "added_tokens": whole-unit tokens found in the text before normalization and BPE.
// Matching follows HF's AddedVocabulary: leftmost-longest, non-overlapping, over all tokens of a stage
// (normalized=false tokens on the raw text, normalized=true ones on normalized text), after which special
// tokens are dropped when not parsing specials and single_word/lstrip/rstrip are applied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedTokens {
 public:
  // `section` is the "added_tokens" array (or null); normalized tokens are matched by their normalized form.
  static AddedTokens from_json(const nlohmann::json& section, const std::string& path,
                               const Normalizer& normalizer);

  // A stretch of text: either an added token (id >= 0) covering [start, end) including any stripped
  // whitespace, or plain text (id == -1).
  struct Segment {
    size_t start;
    size_t end;
    int32_t id;
  };
  enum class Stage { kRaw, kNormalized };
  // Appends segments covering all of `text` (nothing for empty text).
  void split(std::string_view text, Stage stage, bool parse_special, std::vector<Segment>& out) const;
  bool has_stage(Stage stage) const { return !tries_[static_cast<int>(stage)].nodes.empty(); }
  // Whether split() of `text` is split() of text[0, pos) followed by split() of text[pos, end) (shifted),
  // once a plain segment ending at pos and one starting there are joined, for either parse_special: no
  // token of `stage` occurs across pos, and none of them has lstrip, rstrip or single_word, which look
  // beyond the match.
  bool splits_at(std::string_view text, size_t pos, Stage stage) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;

 private:
  // A byte trie; node 0 is the root. Children are few per node, so a linear scan beats a table.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token = -1;  // index into tokens_ of the pattern ending here
    };
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    size_t max_length = 0;      // of the longest pattern
    bool looks_around = false;  // some token has lstrip, rstrip or single_word
    void insert(std::string_view pattern, int32_t token);
    // Length and token of the longest pattern starting at text[pos], or {0, -1}.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie tries_[2];
};

}  // namespace m3::tok
