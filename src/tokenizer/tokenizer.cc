// Tokenizer pipeline, in HF's order: added tokens on the raw text -> normalizer -> added tokens on the
// normalized text -> pre-tokenizer -> BPE per word. Decoding uses a table of each id's bytes built at load
// time. The decoder and post_processor sections are only accepted when they change nothing beyond that
// (ByteLevel); truncation and padding are encode-batch options the server applies itself and are ignored.
// Long texts are encoded on several threads (parallel_encode.h) with the same result as on one.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_loader.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/segment_cache.h"
#include "tokenizer/utf8.h"

namespace m3 {
namespace tok {
namespace {

// Accepts null (when allowed), a ByteLevel step, or a Sequence made only of those.
void check_byte_level_only(const nlohmann::json& section, const std::string& name, const std::string& path,
                           bool allow_null) {
  const std::string where = "tokenizer: " + path + ": " + name;
  if (section.is_null()) {
    if (!allow_null) fail(ErrorKind::kUnsupported, where + " null is not supported (only ByteLevel)");
    return;
  }
  if (!section.is_object() || !section.contains("type") || !section["type"].is_string()) {
    fail(ErrorKind::kCorruptData, where + " must be an object with a string \"type\"");
  }
  const std::string& type = section["type"].get_ref<const std::string&>();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const char* key = name == "decoder" ? "decoders" : "processors";
    auto it = section.find(key);
    if (it == section.end() || !it->is_array())
      fail(ErrorKind::kCorruptData, where + " Sequence lacks \"" + key + "\"");
    for (const auto& child : *it) check_byte_level_only(child, name, path, false);
    return;
  }
  fail(ErrorKind::kUnsupported, where + ".type \"" + type + "\" is not supported (only ByteLevel)");
}

[[noreturn]] void fail_invalid_utf8(size_t byte) {
  fail(ErrorKind::kInvalidArgument,
       "tokenizer: text to encode is not valid UTF-8 (byte " + std::to_string(byte) + ")");
}

}  // namespace

class TokenizerImpl {
 public:
  explicit TokenizerImpl(TokenizerJson file);

  void encode(std::string_view text, bool parse_special, size_t threads, std::vector<int32_t>& ids) const;

  std::string path;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedTokens added;
  size_t vocab_size = 0;

  // Per id: its decoded bytes in bytes_arena[byte_offsets[id], byte_offsets[id + 1]) and flag bits.
  static constexpr uint8_t kKnown = 1, kSpecial = 2;
  std::string bytes_arena;
  std::vector<uint32_t> byte_offsets;
  std::vector<uint8_t> flags;
  mutable SegmentCache segments;  // long segments between raw-stage added tokens

 private:
  // encode_normalized through the segment cache when the segment is long.
  void encode_segment(std::string_view text, bool parse_special, std::vector<int32_t>& ids) const;
  void encode_normalized(std::string_view text, bool parse_special, std::vector<int32_t>& ids) const;
  void encode_words(std::string_view text, std::vector<int32_t>& ids) const;
  void split_parallel(std::string_view text, bool parse_special, size_t threads,
                      std::vector<AddedTokens::Segment>& parts) const;
  void encode_parallel(std::string_view text, std::span<const AddedTokens::Segment> parts, bool parse_special,
                       size_t threads, std::vector<int32_t>& ids) const;
};

TokenizerImpl::TokenizerImpl(TokenizerJson file) : path(file.path) {
  const nlohmann::json& root = file.root;
  auto section = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  normalizer = Normalizer::from_json(section("normalizer"), path);
  pre_tokenizer = PreTokenizer::from_json(section("pre_tokenizer"), path);
  check_byte_level_only(section("decoder"), "decoder", path, /*allow_null=*/false);
  check_byte_level_only(section("post_processor"), "post_processor", path, /*allow_null=*/true);
  model = BpeModel::build(file, pre_tokenizer.byte_level());
  added = AddedTokens::from_json(section("added_tokens"), path, normalizer);

  int64_t max_id = model->max_id();
  for (const AddedToken& t : added.tokens()) max_id = std::max<int64_t>(max_id, t.id);
  vocab_size = static_cast<size_t>(max_id + 1);

  flags.assign(vocab_size, 0);
  byte_offsets.assign(vocab_size + 1, 0);
  bytes_arena.reserve(vocab_size * 8);
  for (size_t id = 0; id < vocab_size; ++id) {
    byte_offsets[id] = static_cast<uint32_t>(bytes_arena.size());
    const auto i = static_cast<int32_t>(id);
    if (const AddedToken* t = added.find_id(i)) {
      flags[id] = kKnown | (t->special ? kSpecial : 0);
      append_token_bytes(t->content, bytes_arena);
    } else if (const std::string_view* s = model->id_to_token(i)) {
      flags[id] = kKnown;
      append_token_bytes(*s, bytes_arena);
    }
  }
  byte_offsets[vocab_size] = static_cast<uint32_t>(bytes_arena.size());
  // HF skips by content: a vocabulary entry spelled like a special token is skipped too.
  for (const AddedToken& t : added.tokens()) {
    if (!t.special) continue;
    if (auto id = model->token_to_id(t.content)) flags[*id] |= kSpecial;
  }
}

void TokenizerImpl::encode_words(std::string_view text, std::vector<int32_t>& ids) const {
  thread_local std::vector<std::string_view> words;
  std::deque<std::string> storage;
  words.clear();
  pre_tokenizer.split(text, words, storage);
  for (std::string_view w : words) model->tokenize(w, ids);
}

void TokenizerImpl::encode_normalized(std::string_view text, bool parse_special,
                                      std::vector<int32_t>& ids) const {
  std::string normalized;
  if (!normalizer.is_identity()) {
    normalizer.normalize(text, normalized);
    text = normalized;
  }
  if (!added.has_stage(AddedTokens::Stage::kNormalized)) {
    encode_words(text, ids);
    return;
  }
  std::vector<AddedTokens::Segment> segments;
  added.split(text, AddedTokens::Stage::kNormalized, parse_special, segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      encode_words(text.substr(seg.start, seg.end - seg.start), ids);
    }
  }
}

void TokenizerImpl::encode_segment(std::string_view text, bool parse_special,
                                   std::vector<int32_t>& ids) const {
  if (text.size() < SegmentCache::kMinBytes) return encode_normalized(text, parse_special, ids);
  if (segments.find(text, parse_special, ids)) return;
  const size_t begin = ids.size();
  encode_normalized(text, parse_special, ids);
  segments.insert(text, parse_special, std::span<const int32_t>(ids).subspan(begin));
}

void TokenizerImpl::encode(std::string_view text, bool parse_special, size_t threads,
                           std::vector<int32_t>& ids) const {
  std::vector<AddedTokens::Segment> parts;
  // Cut points say nothing about added tokens matched after normalization (parallel_encode.h).
  threads = encode_threads(text.size(), threads);
  if (threads > 1 && !added.has_stage(AddedTokens::Stage::kNormalized)) {
    split_parallel(text, parse_special, threads, parts);
    return encode_parallel(text, parts, parse_special, threads, ids);
  }
  if (size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) fail_invalid_utf8(bad);
  if (added.has_stage(AddedTokens::Stage::kRaw)) {
    added.split(text, AddedTokens::Stage::kRaw, parse_special, parts);
  } else if (!text.empty()) {
    parts.push_back({0, text.size(), -1});
  }
  for (const auto& seg : parts) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      encode_segment(text.substr(seg.start, seg.end - seg.start), parse_special, ids);
    }
  }
}

// UTF-8 validation and the raw-stage added-token split of encode(), on parts cut by raw_cut_points(). A plain
// segment that runs across a cut comes back in two pieces, joined again here: split() never emits two plain
// segments in a row.
void TokenizerImpl::split_parallel(std::string_view text, bool parse_special, size_t threads,
                                   std::vector<AddedTokens::Segment>& parts) const {
  const std::vector<size_t> starts = raw_cut_points(text, threads * 4, added);
  std::vector<size_t> bad(starts.size(), std::string_view::npos);
  std::vector<std::vector<AddedTokens::Segment>> split(starts.size());
  run_parallel(starts.size(), threads, [&](size_t i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
    const std::string_view part = text.substr(starts[i], end - starts[i]);
    if (size_t b = find_invalid_utf8(part); b != std::string_view::npos) bad[i] = starts[i] + b;
    if (added.has_stage(AddedTokens::Stage::kRaw)) {
      added.split(part, AddedTokens::Stage::kRaw, parse_special, split[i]);
    } else {
      split[i].push_back({0, part.size(), -1});
    }
    for (auto& seg : split[i]) {
      seg.start += starts[i];
      seg.end += starts[i];
    }
  });
  for (size_t b : bad) {
    if (b != std::string_view::npos) fail_invalid_utf8(b);
  }
  for (const auto& segs : split) {
    for (const auto& seg : segs) {
      if (seg.id < 0 && !parts.empty() && parts.back().id < 0 && parts.back().end == seg.start) {
        parts.back().end = seg.end;
      } else {
        parts.push_back(seg);
      }
    }
  }
}

// The segments in order become units of work: an added token, a segment encoded whole (through the cache
// as on one thread), the cached ids of a long segment, or a piece of a long segment cut at cut_points().
// Consecutive units are grouped into tasks of about `piece` bytes, several per thread so that uneven text
// (CJK costs more per byte than ASCII) still keeps every thread busy; task outputs are joined in order.
void TokenizerImpl::encode_parallel(std::string_view text, std::span<const AddedTokens::Segment> parts,
                                    bool parse_special, size_t threads, std::vector<int32_t>& ids) const {
  struct Unit {
    enum class Kind { kToken, kSegment, kCached, kPiece } kind;
    std::string_view text;  // kSegment, kPiece
    int32_t id = -1;        // kToken: the id; kCached: index into `cached`
  };
  struct LongSegment {  // a segment cut into pieces, remembered in the cache once encoded
    std::string_view text;
    size_t first_unit, end_unit;
  };
  const size_t piece = std::max(kBytesPerThread / 4, text.size() / (threads * 4));
  std::vector<Unit> units;
  std::vector<std::vector<int32_t>> cached;
  std::vector<LongSegment> long_segments;
  for (const auto& seg : parts) {
    const std::string_view s = text.substr(seg.start, seg.end - seg.start);
    if (seg.id >= 0) {
      units.push_back({Unit::Kind::kToken, {}, seg.id});
    } else if (s.size() <= piece) {
      units.push_back({Unit::Kind::kSegment, s});
    } else if (std::vector<int32_t> hit; segments.find(s, parse_special, hit)) {
      units.push_back({Unit::Kind::kCached, {}, static_cast<int32_t>(cached.size())});
      cached.push_back(std::move(hit));
    } else {
      const std::vector<size_t> starts = cut_points(s, piece, normalizer, pre_tokenizer);
      long_segments.push_back({s, units.size(), units.size() + starts.size()});
      for (size_t i = 0; i < starts.size(); ++i) {
        const size_t end = i + 1 < starts.size() ? starts[i + 1] : s.size();
        units.push_back({Unit::Kind::kPiece, s.substr(starts[i], end - starts[i])});
      }
    }
  }
  std::vector<size_t> task_starts;  // first unit of each task
  for (size_t u = 0, bytes = piece; u < units.size(); ++u) {
    if (bytes >= piece) {
      task_starts.push_back(u);
      bytes = 0;
    }
    bytes += units[u].text.size();
  }
  task_starts.push_back(units.size());

  std::vector<std::vector<int32_t>> outputs(task_starts.size() - 1);
  std::vector<size_t> unit_ids(units.size());  // how many ids each unit produced
  run_parallel(outputs.size(), threads, [&](size_t t) {
    std::vector<int32_t>& out = outputs[t];
    size_t bytes = 0;
    for (size_t u = task_starts[t]; u < task_starts[t + 1]; ++u) bytes += units[u].text.size();
    out.reserve(bytes / 3 + 16);
    for (size_t u = task_starts[t]; u < task_starts[t + 1]; ++u) {
      const size_t before = out.size();
      const Unit& unit = units[u];
      switch (unit.kind) {
        case Unit::Kind::kToken:
          out.push_back(unit.id);
          break;
        case Unit::Kind::kSegment:
          encode_segment(unit.text, parse_special, out);
          break;
        case Unit::Kind::kCached:
          out.insert(out.end(), cached[unit.id].begin(), cached[unit.id].end());
          break;
        case Unit::Kind::kPiece:
          encode_normalized(unit.text, parse_special, out);
          break;
      }
      unit_ids[u] = out.size() - before;
    }
  });

  const size_t base = ids.size();
  size_t total = 0;
  for (const auto& out : outputs) total += out.size();
  ids.reserve(base + total);
  for (const auto& out : outputs) ids.insert(ids.end(), out.begin(), out.end());
  size_t offset = base, u = 0;
  for (const LongSegment& seg : long_segments) {
    for (; u < seg.first_unit; ++u) offset += unit_ids[u];
    size_t end = offset;
    for (; u < seg.end_unit; ++u) end += unit_ids[u];
    segments.insert(seg.text, parse_special, std::span<const int32_t>(ids).subspan(offset, end - offset));
    offset = end;
  }
}

}  // namespace tok

Tokenizer Tokenizer::load(const std::string& path) {
  return Tokenizer(std::make_shared<const tok::TokenizerImpl>(tok::read_tokenizer_json(path)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  return encode_with_threads(text, tok::max_encode_threads(), parse_special);
}

std::vector<int32_t> Tokenizer::encode_with_threads(std::string_view text, size_t threads,
                                                    bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode(text, parse_special, threads, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  tok::Utf8LossyDecoder decoder;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    decoder.feed(token_bytes(id), out);
  }
  decoder.finish(out);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const tok::AddedToken* t = impl_->added.find_content(token)) return t->id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const tok::AddedToken* t = impl_->added.find_id(id)) return t->content;
  if (const std::string_view* s = impl_->model->id_to_token(id)) return std::string(*s);
  return {};
}

bool Tokenizer::is_known(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->vocab_size &&
         (impl_->flags[id] & tok::TokenizerImpl::kKnown);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->vocab_size &&
         (impl_->flags[id] & tok::TokenizerImpl::kSpecial);
}

size_t Tokenizer::segment_cache_hits() const {
  return impl_->segments.hits();
}

size_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->vocab_size) return {};
  const uint32_t begin = impl_->byte_offsets[id], end = impl_->byte_offsets[id + 1];
  return std::string_view(impl_->bytes_arena).substr(begin, end - begin);
}

std::vector<int32_t> Tokenizer::added_token_ids() const {
  std::vector<int32_t> ids;
  for (const auto& t : impl_->added.tokens()) ids.push_back(t.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const std::string& Tokenizer::path() const {
  return impl_->path;
}

}  // namespace m3
