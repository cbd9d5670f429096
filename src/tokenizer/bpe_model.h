// The BPE model of a HF tokenizer.json: vocabulary (spelling <-> id), the merge table ((left, right) ->
// rank, merged id), and the rank-ordered merge loop over one pre-tokenized word, with a bounded, thread-safe
// word cache. Invariants after build(): every merge's two parts and their concatenation are in the vocab;
// tokenize() is const and safe to call from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_loader.h"

namespace m3::tok {

class BpeModel {
 public:
  // Consumes file.vocab / file.merges; reads the other model fields from file.root["model"].
  // `byte_level` says the pre-tokenizer maps bytes to the GPT-2 alphabet, so words arrive as raw bytes.
  static std::unique_ptr<BpeModel> build(TokenizerJson& file, bool byte_level);

  // Appends the ids of one pre-tokenized word. With byte_level the word is raw bytes (any values);
  // otherwise it is UTF-8 whose characters are looked up directly.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary spelling of `id`, or nullptr when the model has no such id.
  const std::string_view* id_to_token(int32_t id) const;
  int32_t max_id() const { return max_id_; }

 private:
  BpeModel() = default;

  struct MergeSlot {
    uint64_t key;  // (left id << 32) | right id; kEmptyKey when free
    int32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  void add_vocab(const std::string& path, std::vector<std::pair<std::string, int64_t>>& vocab);
  void add_merges(const std::string& path, std::vector<std::pair<std::string, std::string>>& merges);
  int32_t find_token(std::string_view s) const;  // -1 when absent
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void lookup_unit(std::string_view unit, std::vector<int32_t>& syms, int32_t& pending_unk) const;
  void merge_word(std::vector<int32_t>& syms) const;
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;

  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  int32_t max_id_ = -1;

  // Vocabulary: spellings live in one arena; token_index_ is an open-addressing table of ids.
  std::string arena_;
  std::vector<std::string_view> spelling_;  // by id; data()==nullptr for ids the vocab lacks
  std::vector<int32_t> token_index_;
  uint64_t token_mask_ = 0;

  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;

  std::array<int32_t, 256> byte_ids_{};  // id of each byte's one-character spelling, -1 if absent
  bool all_bytes_known_ = false;

  // Sharded so concurrent encoders (and the threads of one long encode) rarely contend; a full shard is
  // simply cleared.
  static constexpr size_t kCacheShards = 256;
  static constexpr size_t kCacheEntriesPerShard = 256;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct WordHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const;
  };
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, WordHash, std::equal_to<>> words;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace m3::tok
