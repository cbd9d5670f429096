// BPE model: flat open-addressing tables (faster to build and probe than std::unordered_map for 200k
// entries) and the merge loop. The loop always applies the lowest-rank merge among the current adjacent
// pairs, leftmost first on ties, which is the order HF tokenizers uses; a heap with lazy invalidation keeps
// it O(n log n) for the long single-letter runs the o200k split can produce.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

uint64_t hash_bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  }
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 32);
}

}  // namespace

size_t BpeModel::WordHash::operator()(std::string_view s) const {
  return hash_bytes(s);
}

namespace {

uint64_t hash_pair(uint64_t key) {
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 31);
}

size_t table_size_for(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  return cap;
}

std::string model_field_error(const std::string& path, const std::string& field, const std::string& what) {
  return "tokenizer: " + path + ": model." + field + " " + what;
}

bool json_is_null_or_empty_string(const nlohmann::json& model, const char* key) {
  auto it = model.find(key);
  return it == model.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
}

bool json_bool(const std::string& path, const nlohmann::json& model, const char* key) {
  auto it = model.find(key);
  if (it == model.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail(ErrorKind::kCorruptData, model_field_error(path, key, "must be a boolean"));
  return it->get<bool>();
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::build(TokenizerJson& file, bool byte_level) {
  const std::string& path = file.path;
  auto mit = file.root.find("model");
  if (mit == file.root.end() || !mit->is_object()) {
    fail(ErrorKind::kCorruptData, "tokenizer: " + path + ": missing \"model\" object");
  }
  const nlohmann::json& model = *mit;
  if (auto t = model.find("type"); t != model.end()) {
    if (!t->is_string() || t->get_ref<const std::string&>() != "BPE") {
      fail(ErrorKind::kUnsupported,
           "tokenizer: " + path + ": model.type " + t->dump() + " is not supported (only BPE)");
    }
  }
  if (!file.has_vocab)
    fail(ErrorKind::kCorruptData, model_field_error(path, "vocab", "is missing or not an object"));
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    if (!d->is_number())
      fail(ErrorKind::kCorruptData, model_field_error(path, "dropout", "must be a number"));
    if (d->get<double>() > 0.0) {
      fail(ErrorKind::kUnsupported,
           model_field_error(path, "dropout", "> 0 is not supported (non-deterministic)"));
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!json_is_null_or_empty_string(model, key)) {
      fail(ErrorKind::kUnsupported, model_field_error(path, key, "is not supported"));
    }
  }

  std::unique_ptr<BpeModel> m(new BpeModel());
  m->byte_level_ = byte_level;
  m->byte_fallback_ = json_bool(path, model, "byte_fallback");
  m->fuse_unk_ = json_bool(path, model, "fuse_unk");
  m->ignore_merges_ = json_bool(path, model, "ignore_merges");
  m->add_vocab(path, file.vocab);
  m->add_merges(path, file.merges);

  if (auto u = model.find("unk_token"); u != model.end() && !u->is_null()) {
    if (!u->is_string())
      fail(ErrorKind::kCorruptData, model_field_error(path, "unk_token", "must be a string"));
    m->unk_id_ = m->find_token(u->get_ref<const std::string&>());
    if (m->unk_id_ < 0) {
      fail(ErrorKind::kCorruptData,
           model_field_error(path, "unk_token", "'" + u->get<std::string>() + "' is not in model.vocab"));
    }
  }

  m->all_bytes_known_ = byte_level;
  for (int b = 0; b < 256; ++b) {
    std::string unit;
    append_utf8(byte_to_char(static_cast<uint8_t>(b)), unit);
    m->byte_ids_[b] = byte_level ? m->find_token(unit) : -1;
    if (m->byte_ids_[b] < 0) m->all_bytes_known_ = false;
  }
  return m;
}

void BpeModel::add_vocab(const std::string& path, std::vector<std::pair<std::string, int64_t>>& vocab) {
  size_t total = 0;
  for (const auto& [tok, id] : vocab) {
    if (id < 0 || id >= INT32_MAX) {
      fail(
          ErrorKind::kCorruptData,
          model_field_error(path, "vocab", "id " + std::to_string(id) + " of '" + tok + "' is out of range"));
    }
    max_id_ = std::max<int32_t>(max_id_, static_cast<int32_t>(id));
    total += tok.size();
  }
  // One spelling per id keeps id_to_token and token_to_id inverse to each other.
  std::vector<bool> seen(static_cast<size_t>(max_id_ + 1));
  for (const auto& [tok, id] : vocab) {
    if (seen[id]) {
      fail(ErrorKind::kCorruptData,
           model_field_error(path, "vocab", "id " + std::to_string(id) + " is given to more than one token"));
    }
    seen[id] = true;
  }
  arena_.reserve(total);
  std::vector<size_t> offsets;
  offsets.reserve(vocab.size());
  for (const auto& [tok, id] : vocab) {
    offsets.push_back(arena_.size());
    arena_ += tok;
  }
  spelling_.assign(static_cast<size_t>(max_id_ + 1), std::string_view());
  token_index_.assign(table_size_for(vocab.size()), -1);
  token_mask_ = token_index_.size() - 1;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto id = static_cast<int32_t>(vocab[i].second);
    std::string_view s(arena_.data() + offsets[i], vocab[i].first.size());
    spelling_[id] = s;
    for (uint64_t h = hash_bytes(s) & token_mask_;; h = (h + 1) & token_mask_) {
      int32_t& slot = token_index_[h];
      if (slot < 0 || spelling_[slot] == s) {
        slot = id;
        break;
      }
    }
  }
  vocab.clear();
  vocab.shrink_to_fit();
}

int32_t BpeModel::find_token(std::string_view s) const {
  for (uint64_t h = hash_bytes(s) & token_mask_;; h = (h + 1) & token_mask_) {
    int32_t id = token_index_[h];
    if (id < 0) return -1;
    if (spelling_[id] == s) return id;
  }
}

void BpeModel::add_merges(const std::string& path, std::vector<std::pair<std::string, std::string>>& merges) {
  merges_.assign(table_size_for(merges.size()), MergeSlot{kEmptyKey, 0, 0});
  merge_mask_ = merges_.size() - 1;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    joined.assign(a).append(b);
    const int32_t ia = find_token(a), ib = find_token(b), im = find_token(joined);
    if (ia < 0 || ib < 0 || im < 0) {
      const std::string& missing = ia < 0 ? a : ib < 0 ? b : joined;
      fail(ErrorKind::kCorruptData,
           model_field_error(path, "merges",
                             "entry " + std::to_string(rank) + " ('" + a + " " + b + "'): token '" + missing +
                                 "' is not in model.vocab"));
    }
    const uint64_t key = (static_cast<uint64_t>(ia) << 32) | static_cast<uint32_t>(ib);
    for (uint64_t h = hash_pair(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
      MergeSlot& slot = merges_[h];
      if (slot.key == kEmptyKey || slot.key == key) {
        // A repeated pair keeps its last rank, as HF's map construction does.
        slot = MergeSlot{key, static_cast<int32_t>(rank), im};
        break;
      }
    }
  }
  merges.clear();
  merges.shrink_to_fit();
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  for (uint64_t h = hash_pair(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
    const MergeSlot& slot = merges_[h];
    if (slot.key == key) return &slot;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  int32_t id = find_token(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string_view* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id > max_id_ || spelling_[id].data() == nullptr) return nullptr;
  return &spelling_[id];
}

// Resolves one model-alphabet character the way HF's BPE does when the character itself is not a token:
// byte fallback (<0xXX> tokens) if enabled and complete, else the unk token (fused when fuse_unk), else the
// character is dropped.
void BpeModel::lookup_unit(std::string_view unit, std::vector<int32_t>& syms, int32_t& pending_unk) const {
  if (int32_t id = find_token(unit); id >= 0) {
    if (pending_unk >= 0) syms.push_back(pending_unk);
    pending_unk = -1;
    syms.push_back(id);
    return;
  }
  if (byte_fallback_) {
    std::vector<int32_t> ids;
    char name[8];
    for (unsigned char c : unit) {
      std::snprintf(name, sizeof(name), "<0x%02X>", c);
      int32_t id = find_token(name);
      if (id < 0) break;
      ids.push_back(id);
    }
    if (ids.size() == unit.size()) {
      // HF emits these before any still-pending unk; mirror that ordering.
      syms.insert(syms.end(), ids.begin(), ids.end());
      return;
    }
  }
  if (unk_id_ >= 0) {
    if (pending_unk >= 0 && !fuse_unk_) syms.push_back(pending_unk);
    pending_unk = unk_id_;
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  syms.clear();
  if (all_bytes_known_) {
    for (char c : word) syms.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return;
  }
  int32_t pending_unk = -1;
  std::string unit;
  size_t i = 0;
  while (i < word.size()) {
    unit.clear();
    if (byte_level_) {
      append_utf8(byte_to_char(static_cast<uint8_t>(word[i])), unit);
      ++i;
    } else {
      size_t start = i;
      next_code_point(word, i);
      unit.assign(word.substr(start, i - start));
    }
    lookup_unit(unit, syms, pending_unk);
  }
  if (pending_unk >= 0) syms.push_back(pending_unk);
}

void BpeModel::merge_word(std::vector<int32_t>& syms) const {
  const auto n = static_cast<int32_t>(syms.size());
  if (n < 2) return;
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol; symbols keep their index when they absorb a right neighbour
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<int32_t> next;
  thread_local std::vector<int32_t> prev;
  thread_local std::vector<Candidate> heap;
  next.resize(n);
  prev.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n) {
      if (const MergeSlot* m = find_merge(syms[i], syms[i + 1])) heap.push_back({m->rank, i});
    }
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    const int32_t right = next[c.pos];
    // Entries go stale when a neighbour merged since they were queued; the pair's rank identifies it.
    if (syms[c.pos] < 0 || right < 0) continue;
    const MergeSlot* m = find_merge(syms[c.pos], syms[right]);
    if (m == nullptr || m->rank != c.rank) continue;
    syms[c.pos] = m->merged;
    syms[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) {
      if (const MergeSlot* l = find_merge(syms[prev[c.pos]], syms[c.pos])) {
        heap.push_back({l->rank, prev[c.pos]});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    }
    if (next[c.pos] >= 0) {
      if (const MergeSlot* r = find_merge(syms[c.pos], syms[next[c.pos]])) {
        heap.push_back({r->rank, c.pos});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    }
  }
  syms.erase(std::remove(syms.begin(), syms.end(), -1), syms.end());
  // A single huge word (megabytes of one letter) must not pin its scratch memory to the thread forever.
  constexpr size_t kKeepScratch = 1 << 16;
  if (next.capacity() > kKeepScratch) {
    std::vector<int32_t>().swap(next);
    std::vector<int32_t>().swap(prev);
    std::vector<Candidate>().swap(heap);
  }
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    int32_t id = byte_level_ ? find_token(byte_level_spelling(word)) : find_token(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  thread_local std::vector<int32_t> syms;
  initial_symbols(word, syms);
  merge_word(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (syms.capacity() > (1 << 16)) std::vector<int32_t>().swap(syms);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (all_bytes_known_ && word.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedWordBytes) {
    tokenize_uncached(word, out);
    return;
  }
  CacheShard& shard = cache_[hash_bytes(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  tokenize_uncached(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.words.size() >= kCacheEntriesPerShard) shard.words.clear();
  shard.words.emplace(std::string(word), std::move(ids));
}

}  // namespace m3::tok
