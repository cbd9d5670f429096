// Host-side plan of a paged attention launch (plain C++, no CUDA headers, so the model layer can call it):
// the batch's tokens cut into tiles of consecutive tokens of one sequence, and the split-K count / workspace
// size. A CTA's rows are one tile's tokens x the query heads of one KV head (packed into the MMA M
// dimension), so a tile holds at most attention_tile_tokens(group, dim) tokens; decode rows (one token per
// sequence) are one tile each. Tiles never cross sequences. The plan depends only on host data (chunk
// boundaries), never on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace m3::cuda {

// One tile: tokens [first, first + count) of the batch, all of one sequence, consecutive positions.
struct AttentionTile {
  int32_t first = 0;
  int32_t count = 0;
};

// One sequence's tokens in the batch: [first, first + count).
struct TokenRange {
  int32_t first = 0;
  int32_t count = 0;
};

struct AttentionPlan {
  std::vector<AttentionTile> tiles;  // upload as is (two int32 per tile)
  int max_tokens = 0;                // most tokens in one tile
};

// Query rows one CTA holds: 128 (64 for head_dim 256, whose tiles need twice the shared memory per row).
int attention_max_rows(int dim);
// Tokens one tile packs for `group` query heads per KV head (>= 1; a group wider than the rows is cut into
// head chunks, one CTA each).
int attention_tile_tokens(int group, int dim);
AttentionPlan plan_attention(const std::vector<TokenRange>& seqs, int group, int dim);

// Split-K count for `ctas` (tile, KV head, head chunk) CTAs over at most `max_keys` keys each: 1 when the
// CTAs already fill the GPU, else enough splits for ~2 CTAs per SM with >= 2 key tiles (128 keys) per split.
// A pure function of its arguments (CUDA-graph safe).
int attention_splits(int64_t ctas, int64_t max_keys, int num_sms);
// The same for the decode kernel (one token per tile): minimises a small time model (waves of the CTAs that
// fit an SM, per wave a fixed chain of dependent loads plus the larger of the CTA's latency-bound rounds of
// in-flight keys and its share of HBM, plus the last CTA's merge of `splits` partials) over splits with >=
// 128 keys each; fp8: FP8 pages (fewer bytes per key, longer rounds). Pure (CUDA-graph safe).
int attention_decode_splits(int64_t ctas, int64_t max_keys, int dim, int num_sms, bool fp8 = false);

// The decode kernel's shape (attention.cu builds from these; the split model above uses them): warps per
// CTA, each streaming 16-key units through its own cp.async ring of kAttentionDecodeRing units (ring - 1 in
// flight while one is computed), and the CTA's shared memory: Q [16][dim + 8] bf16, per warp its ring (bf16
// pages: K and V [16][dim + 8] bf16 per unit; FP8 pages: K and V [16][dim] e4m3 and their 2 x 16 fp32 scales
// per unit (rows padded to dim + 16 bytes), then one bf16 unit the landed unit is widened into), split-K
// weights [16][64] fp32 and 16 ints.
constexpr int kAttentionDecodeRing = 3;
// Bytes of one e4m3 K or V row in shared memory, both attention kernels: padded by 16 so that the 16-byte
// chunks of 8 consecutive rows fall in distinct banks for the threads that widen them.
constexpr int attention_fp8_row_bytes(int dim) {
  return dim + 16;
}
constexpr int attention_decode_warps(int dim) {
  return dim <= 128 ? 8 : 4;
}
constexpr int attention_decode_unit_bytes(int dim, bool fp8) {  // one ring unit
  return fp8 ? 2 * 16 * attention_fp8_row_bytes(dim) + 2 * 16 * 4 : 2 * 16 * (dim + 8) * 2;
}
constexpr int attention_decode_warp_bytes(int dim, bool fp8) {  // one warp's ring (+ widened unit)
  return kAttentionDecodeRing * attention_decode_unit_bytes(dim, fp8) +
         (fp8 ? attention_decode_unit_bytes(dim, false) : 0);
}
constexpr int attention_decode_smem_bytes(int dim, bool fp8 = false) {
  return 16 * (dim + 8) * 2 + attention_decode_warps(dim) * attention_decode_warp_bytes(dim, fp8) +
         16 * 64 * 4 + 16 * 4;
}

// fp32 workspace of a launch with `splits` > 1 (0 when splits == 1), in float offsets: the split-K arrival
// counters (one 8-byte word per (tile, KV head, head chunk); at most T x heads), the partial outputs
// [splits, T, heads, dim] and their log-sum-exps [splits, T, heads]. The counters need no initialisation:
// a word the kernel did not write counts as zero, and the last CTA of each group leaves it at zero (tagged),
// so CUDA-graph replays and later launches of any shape stay correct.
struct AttentionWorkspace {
  size_t counters = 0, partials = 0, lse = 0, floats = 0;
};
AttentionWorkspace attention_workspace_layout(int T, int heads, int dim, int splits);
size_t attention_workspace_floats(int T, int heads, int dim, int splits);

}  // namespace m3::cuda
