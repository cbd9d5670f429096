// Ids of long text segments, remembered across encode calls. Added tokens split a text into segments that are
// tokenized independently (tokenizer.cc), so a segment's ids depend on its bytes alone: a chat prompt resent
// with one more turn (an agent's next request) re-tokenizes only the segments it has not seen, not the whole
// conversation. Exact by construction (a hit compares the whole segment); bounded by bytes, least recently
// used out first; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace m3::tok {

class SegmentCache {
 public:
  static constexpr size_t kMinBytes = 1024;  // shorter segments are cheaper to tokenize than to look up
  explicit SegmentCache(size_t max_bytes = size_t{64} << 20) : max_bytes_(max_bytes) {}

  // Appends the remembered ids of `text` (tokenized with `parse_special`) to `out`; false if unknown.
  bool find(std::string_view text, bool parse_special, std::vector<int32_t>& out);
  void insert(std::string_view text, bool parse_special, std::span<const int32_t> ids);
  size_t hits() const;

 private:
  struct Entry {
    uint64_t key;
    std::string text;
    bool parse_special;
    std::vector<int32_t> ids;
  };
  static uint64_t key_of(std::string_view text, bool parse_special);

  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0, hits_ = 0;
  const size_t max_bytes_;
};

}  // namespace m3::tok
