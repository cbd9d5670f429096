// Host-side tiling of a batch for paged attention and the split-K heuristic (see attention_plan.h).
#include "kernels/attention_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace m3::cuda {
namespace {

constexpr int kKeyTile = 64;  // keys per pipeline stage of the attention kernel
constexpr int kMaxSplits = 32;

// Decode time model (microseconds, bytes per microsecond), H200: per wave of CTAs a fixed chain of dependent
// loads (tile and token meta, selection / page table, the first K/V bytes) and the larger of the CTA's
// latency-bound rounds (each moves the keys its warps keep in flight) and its share of HBM; the last CTA's
// merge of the partials: an atomic round trip plus reading them from L2 at one SM's rate.
constexpr double kDecodeFixedUs = 2.0, kDecodeRoundUs = 2.0, kHbmBytesPerUs = 4.0e6;
constexpr double kFp8RoundCost = 1.5;  // FP8 round / bf16 round (measured: attention_decode_splits bench)
// The merge rate is calibrated on attention_decode_splits (dense B = 1, L = 8K: 16 -> 32 splits adds 6-8 us).
constexpr double kMergeFixedUs = 1.0, kMergeBytesPerUs = 4.0e4;
constexpr int kDecodeRows = 16, kSmemPerSm = 228 * 1024, kSmemPerCta = 1024;
}  // namespace

int attention_max_rows(int dim) {
  return dim > 128 ? 64 : 128;
}

int attention_tile_tokens(int group, int dim) {
  return std::max(1, attention_max_rows(dim) / std::max(1, group));
}

AttentionPlan plan_attention(const std::vector<TokenRange>& seqs, int group, int dim) {
  AttentionPlan plan;
  const int cap = attention_tile_tokens(group, dim);
  for (const TokenRange& s : seqs) {
    if (s.count <= 0) continue;
    // Equal-sized tiles (ceil(count / n) tokens) rather than full tiles plus a short tail.
    const int n = (s.count + cap - 1) / cap;
    for (int i = 0; i < n; ++i) {
      const int32_t begin = static_cast<int32_t>(int64_t(s.count) * i / n);
      const int32_t end = static_cast<int32_t>(int64_t(s.count) * (i + 1) / n);
      plan.tiles.push_back({s.first + begin, end - begin});
      plan.max_tokens = std::max<int>(plan.max_tokens, end - begin);
    }
  }
  return plan;
}

int attention_splits(int64_t ctas, int64_t max_keys, int num_sms) {
  if (ctas <= 0 || ctas >= num_sms) return 1;
  const int64_t key_tiles = (max_keys + kKeyTile - 1) / kKeyTile;
  const int64_t want = (2 * int64_t(num_sms) + ctas - 1) / ctas;
  return static_cast<int>(std::clamp<int64_t>(std::min(want, key_tiles / 2), 1, kMaxSplits));
}

int attention_decode_splits(int64_t ctas, int64_t max_keys, int dim, int num_sms, bool fp8) {
  if (ctas <= 0 || max_keys <= 0) return 1;
  const int most = static_cast<int>(std::clamp<int64_t>(max_keys / (2 * kKeyTile), 1, kMaxSplits));
  const int per_sm = std::max(1, kSmemPerSm / (attention_decode_smem_bytes(dim, fp8) + kSmemPerCta));
  const double slots = double(per_sm) * std::max(1, num_sms);
  const double key_bytes = fp8 ? 2.0 * (dim + 4) : 4.0 * dim;  // K + V: bf16, or e4m3 + fp32 scales
  // FP8: a warp also widens each landed unit before its MMAs, which lengthens its rounds.
  const double round_us = kDecodeRoundUs * (fp8 ? kFp8RoundCost : 1.0);
  const int warps = attention_decode_warps(dim), in_flight_units = warps * (kAttentionDecodeRing - 1);
  int best = 1;
  double best_us = std::numeric_limits<double>::infinity();
  for (int s = 1; s <= most; ++s) {
    const double n = double(ctas) * s, waves = std::ceil(n / slots);
    const double keys = std::ceil(double(max_keys) / s), units = std::ceil(keys / 16);
    const double rounds = std::ceil(units / in_flight_units);
    const double hbm_us = keys * key_bytes / (kHbmBytesPerUs / std::min(n, slots));
    double us = waves * (kDecodeFixedUs + std::max(rounds * round_us, hbm_us));
    if (s > 1) us += kMergeFixedUs + s * kDecodeRows * dim * 4.0 / kMergeBytesPerUs;
    if (us < 0.97 * best_us) best = s, best_us = us;  // more splits only for a clear gain
  }
  return best;
}

AttentionWorkspace attention_workspace_layout(int T, int heads, int dim, int splits) {
  AttentionWorkspace w;
  if (splits <= 1) return w;
  const size_t rows = size_t(T) * size_t(heads);
  w.counters = 0;
  w.partials = (2 * rows + 3) / 4 * 4;  // 8-byte counters, partials 16-byte aligned
  w.lse = w.partials + size_t(splits) * rows * size_t(dim);
  w.floats = w.lse + size_t(splits) * rows;
  return w;
}

size_t attention_workspace_floats(int T, int heads, int dim, int splits) {
  return attention_workspace_layout(T, heads, dim, splits).floats;
}

}  // namespace m3::cuda
