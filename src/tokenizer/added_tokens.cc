// Added-token matching. "Whitespace" for lstrip/rstrip is the Unicode White_Space property and a "word
// character" for single_word is Unicode \w (letters, marks, decimal digits, connector punctuation), as in
// the Rust regexes HF uses for these checks.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends text[0, end).
char32_t code_point_before(std::string_view text, size_t end, size_t* start_out) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  char32_t cp = next_code_point(text, i);
  if (start_out) *start_out = start;
  return cp;
}

bool ends_with_word(std::string_view text, size_t end) {
  return end > 0 && is_word_char(code_point_before(text, end, nullptr));
}

bool starts_with_word(std::string_view text, size_t start) {
  if (start >= text.size()) return false;
  return is_word_char(next_code_point(text, start));
}

// Start of the whitespace run that ends at `end`.
size_t whitespace_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t prev;
    if (!is_unicode_whitespace(code_point_before(text, end, &prev))) break;
    end = prev;
  }
  return end;
}

// End of the whitespace run that starts at `start`.
size_t whitespace_run_end(std::string_view text, size_t start) {
  while (start < text.size()) {
    size_t next = start;
    if (!is_unicode_whitespace(next_code_point(text, next))) break;
    start = next;
  }
  return start;
}

bool flag(const nlohmann::json& entry, const char* key, const std::string& where) {
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail(ErrorKind::kCorruptData, where + ": \"" + key + "\" must be a boolean");
  return it->get<bool>();
}

}  // namespace

void AddedTokens::Trie::insert(std::string_view pattern, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
  max_length = std::max(max_length, pattern.size());
  int32_t node = 0;
  for (char ch : pattern) {
    const auto c = static_cast<uint8_t>(ch);
    int32_t child = -1;
    for (const auto& [byte, idx] : nodes[node].children) {
      if (byte == c) child = idx;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(c, child);
      nodes.emplace_back();
    }
    node = child;
  }
  nodes[node].token = token;
}

std::pair<size_t, int32_t> AddedTokens::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, idx] : nodes[node].children) {
      if (byte == c) {
        child = idx;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes[node].token >= 0) best = {i + 1 - pos, nodes[node].token};
  }
  return best;
}

AddedTokens AddedTokens::from_json(const nlohmann::json& section, const std::string& path,
                                   const Normalizer& normalizer) {
  AddedTokens a;
  if (section.is_null()) return a;
  const std::string where = "tokenizer: " + path + ": added_tokens";
  if (!section.is_array()) fail(ErrorKind::kCorruptData, where + " must be an array");
  for (size_t i = 0; i < section.size(); ++i) {
    const auto& entry = section[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!entry.is_object()) fail(ErrorKind::kCorruptData, at + " must be an object");
    auto id = entry.find("id");
    auto content = entry.find("content");
    if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= INT32_MAX) {
      fail(ErrorKind::kCorruptData, at + ": \"id\" must be a non-negative integer");
    }
    if (content == entry.end() || !content->is_string())
      fail(ErrorKind::kCorruptData, at + ": \"content\" must be a string");
    AddedToken t;
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.content = content->get<std::string>();
    if (find_invalid_utf8(t.content) != std::string_view::npos) {
      fail(ErrorKind::kCorruptData, at + ": \"content\" is not valid UTF-8");
    }
    t.special = flag(entry, "special", at);
    t.lstrip = flag(entry, "lstrip", at);
    t.rstrip = flag(entry, "rstrip", at);
    t.single_word = flag(entry, "single_word", at);
    // HF's default for a missing "normalized" is the opposite of "special".
    t.normalized = entry.contains("normalized") ? flag(entry, "normalized", at) : !t.special;
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    if (a.by_id_.count(t.id) || a.by_content_.count(t.content)) {
      fail(ErrorKind::kCorruptData,
           at + ": duplicate added token id " + std::to_string(t.id) + " or content '" + t.content + "'");
    }
    a.by_id_[t.id] = a.tokens_.size();
    a.by_content_[t.content] = a.tokens_.size();
    a.tokens_.push_back(std::move(t));
  }
  std::string pattern;
  for (size_t i = 0; i < a.tokens_.size(); ++i) {
    const AddedToken& t = a.tokens_[i];
    if (t.normalized) {
      normalizer.normalize(t.content, pattern);
      if (!pattern.empty())
        a.tries_[static_cast<int>(Stage::kNormalized)].insert(pattern, static_cast<int32_t>(i));
    } else {
      a.tries_[static_cast<int>(Stage::kRaw)].insert(t.content, static_cast<int32_t>(i));
    }
    a.tries_[static_cast<int>(t.normalized ? Stage::kNormalized : Stage::kRaw)].looks_around |=
        t.lstrip || t.rstrip || t.single_word;
  }
  return a;
}

const AddedToken* AddedTokens::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

// split() reaches pos whichever tokens it keeps: it steps one byte at a time or jumps to the end of a match,
// and no match from before pos ends past it. From pos on it reads only the text after pos, and what it emits
// depends on the earlier text only through the flags excluded here.
bool AddedTokens::splits_at(std::string_view text, size_t pos, Stage stage) const {
  const Trie& trie = tries_[static_cast<int>(stage)];
  if (trie.looks_around) return false;
  // A match that starts further back than `reach` ends at pos at the latest.
  const size_t reach = trie.max_length > 0 ? trie.max_length - 1 : 0;
  for (size_t s = pos > reach ? pos - reach : 0; s < pos; ++s) {
    if (trie.first_byte[static_cast<uint8_t>(text[s])] && s + trie.longest_at(text, s).first > pos)
      return false;
  }
  return true;
}

void AddedTokens::split(std::string_view text, Stage stage, bool parse_special,
                        std::vector<Segment>& out) const {
  if (text.empty()) return;
  const Trie& trie = tries_[static_cast<int>(stage)];
  size_t covered = 0;  // end of the last segment emitted
  size_t pos = 0;      // where the next leftmost-longest search starts
  while (!trie.nodes.empty() && pos < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    auto [len, index] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the search resumes after this match even when the match is then discarded
    const AddedToken& t = tokens_[index];
    if (t.special && !parse_special) continue;
    if (t.single_word && (ends_with_word(text, start) || starts_with_word(text, stop))) continue;
    // A token whose match began inside whitespace already absorbed by an rstrip neighbour is dropped.
    if (start < covered) continue;
    if (t.lstrip) start = std::max(whitespace_run_start(text, start), covered);
    if (t.rstrip) stop = whitespace_run_end(text, stop);
    if (start > covered) out.push_back({covered, start, -1});
    out.push_back({start, stop, t.id});
    covered = stop;
  }
  if (covered < text.size()) out.push_back({covered, text.size(), -1});
}

}  // namespace m3::tok
