// Byte encoding of a forward call: fixed-width fields and length-prefixed arrays of plain structs, in one
// process's native layout (the ranks of a run are the same binary on the same architecture).
#include "model/forward_batch.h"

#include <cstring>
#include <type_traits>

#include "common/error.h"

namespace m3 {
namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <typename T>
  void put_array(std::span<const T> a) {
    put<uint64_t>(a.size());
    out.append(reinterpret_cast<const char*>(a.data()), a.size_bytes());
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> get_array() {
    const uint64_t n = get<uint64_t>();
    if (n > (in_.size() - pos_) / sizeof(T)) fail(ErrorKind::kInternal, "forward call: array past the end");
    std::vector<T> v(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  void take(void* dst, size_t n) {
    if (n > in_.size() - pos_) fail(ErrorKind::kInternal, "forward call: truncated");
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  const std::string& in_;
  size_t pos_ = 0;
};

struct ChunkHeader {
  int32_t token_offset, num_tokens;
  int64_t start_pos;
  int32_t dp_rank;
  uint8_t want_logits;
};

}  // namespace

std::string encode_forward_call(const ForwardBatch& b, const ForwardOptions& o) {
  Writer w;
  w.put<uint8_t>(o.trace_hidden);
  w.put<uint8_t>(o.trace_msa);
  w.put<uint8_t>(o.trace_moe);
  w.put_array(std::span<const KvPageCopy>(b.page_copies));
  w.put_array(std::span<const int32_t>(b.token_ids));
  w.put<uint64_t>(b.seqs.size());
  for (const SeqChunk& s : b.seqs) {
    w.put(ChunkHeader{s.token_offset, s.num_tokens, s.start_pos, s.dp_rank, s.want_logits});
    w.put_array(s.block_table);
  }
  w.put_array(std::span<const SamplingRow>(b.sampling));
  w.put_array(std::span<const LogitAdjustment>(b.sampling_adjustments));
  w.put_array(std::span<const int32_t>(b.embed_rows));
  w.put_array(std::span<const float>(b.embed_values));
  return std::move(w.out);
}

ForwardCall decode_forward_call(const std::string& bytes) {
  Reader r(bytes);
  ForwardCall c;
  c.options.trace_hidden = r.get<uint8_t>();
  c.options.trace_msa = r.get<uint8_t>();
  c.options.trace_moe = r.get<uint8_t>();
  c.batch.page_copies = r.get_array<KvPageCopy>();
  c.batch.token_ids = r.get_array<int32_t>();
  const uint64_t n = r.get<uint64_t>();
  if (n > bytes.size()) fail(ErrorKind::kInternal, "forward call: too many chunks");
  c.block_tables.reserve(n);  // no reallocation: the spans below point into these vectors
  for (uint64_t i = 0; i < n; ++i) {
    const auto h = r.get<ChunkHeader>();
    c.block_tables.push_back(r.get_array<int32_t>());
    c.batch.seqs.push_back(
        {h.token_offset, h.num_tokens, h.start_pos, c.block_tables.back(), h.want_logits != 0, 0, h.dp_rank});
  }
  c.batch.sampling = r.get_array<SamplingRow>();
  c.batch.sampling_adjustments = r.get_array<LogitAdjustment>();
  c.batch.embed_rows = r.get_array<int32_t>();
  c.batch.embed_values = r.get_array<float>();
  if (!r.done()) fail(ErrorKind::kInternal, "forward call: trailing bytes");
  return c;
}

DpSplit split_by_dp_rank(const ForwardBatch& b, int dp) {
  DpSplit s;
  s.token_begin.assign(dp + 1, 0);
  s.row_begin.assign(dp + 1, 0);
  s.seq_begin.assign(dp + 1, 0);
  int prev = 0;
  for (const SeqChunk& c : b.seqs) {
    if (c.dp_rank < prev || c.dp_rank >= dp)
      fail(ErrorKind::kInternal, "forward batch: seqs not grouped by data-parallel rank");
    prev = c.dp_rank;
    s.token_begin[c.dp_rank + 1] += c.num_tokens;
    s.row_begin[c.dp_rank + 1] += c.want_logits ? 1 : 0;
    s.seq_begin[c.dp_rank + 1] += 1;
  }
  for (int r = 0; r < dp; ++r) {
    s.token_begin[r + 1] += s.token_begin[r];
    s.row_begin[r + 1] += s.row_begin[r];
    s.seq_begin[r + 1] += s.seq_begin[r];
  }
  int32_t at = 0;  // the tokens of the seqs, in order, must be the batch's
  for (const SeqChunk& c : b.seqs) {
    if (c.token_offset != at) fail(ErrorKind::kInternal, "forward batch: seqs' tokens out of order");
    at += c.num_tokens;
  }
  if (at != static_cast<int32_t>(b.token_ids.size()))
    fail(ErrorKind::kInternal, "forward batch: tokens outside the seqs");
  return s;
}

ForwardBatch dp_local_batch(const ForwardBatch& b, const DpSplit& s, int r) {
  ForwardBatch local;
  local.page_copies = b.page_copies;
  local.token_ids.assign(b.token_ids.begin() + s.token_begin[r], b.token_ids.begin() + s.token_begin[r + 1]);
  for (int i = s.seq_begin[r]; i < s.seq_begin[r + 1]; ++i) {
    SeqChunk c = b.seqs[i];
    c.token_offset -= s.token_begin[r];
    local.seqs.push_back(c);
  }
  if (!b.sampling.empty()) {
    local.sampling.assign(b.sampling.begin() + s.row_begin[r], b.sampling.begin() + s.row_begin[r + 1]);
    local.sampling_adjustments = b.sampling_adjustments;
  }
  if (r == 0) local.token_masks = b.token_masks;
  if (!b.embed_rows.empty()) {
    const size_t width = b.embed_values.size() / b.embed_rows.size();
    for (size_t i = 0; i < b.embed_rows.size(); ++i) {
      const int32_t row = b.embed_rows[i];
      if (row < s.token_begin[r] || row >= s.token_begin[r + 1]) continue;
      local.embed_rows.push_back(row - s.token_begin[r]);
      local.embed_values.insert(local.embed_values.end(), b.embed_values.begin() + i * width,
                                b.embed_values.begin() + (i + 1) * width);
    }
  }
  return local;
}

void for_each_embed_run(const ForwardBatch& b, int hidden,
                        const std::function<void(int32_t, int32_t, const float*)>& f) {
  const size_t n = b.embed_rows.size();
  if (b.embed_values.size() != n * size_t(hidden))
    fail(ErrorKind::kInternal, "forward batch: embed_values is not embed_rows x hidden");
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && b.embed_rows[j] == b.embed_rows[j - 1] + 1) ++j;
    if (b.embed_rows[i] < 0 || b.embed_rows[j - 1] >= int32_t(b.token_ids.size()) ||
        (i > 0 && b.embed_rows[i] <= b.embed_rows[i - 1]))
      fail(ErrorKind::kInternal, "forward batch: embed_rows out of range or not ascending");
    f(b.embed_rows[i], int32_t(j - i), b.embed_values.data() + i * size_t(hidden));
    i = j;
  }
}

}  // namespace m3
