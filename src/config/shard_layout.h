// Which part of the model one tensor-parallel rank owns: query heads, KV and MSA index heads, the column
// slices of the dense MLPs, the shared expert and every routed expert, and the vocabulary rows of the
// embedding and the LM head. One plain struct that the loader (which slices to read), the weights and the
// kernels' launch shapes all read, so no code asks "if tp > 1". Invariants: the ranks' query heads, MLP
// columns and vocabulary rows partition the model's exactly; a rank's KV heads are those its query heads
// attend with (below TP = number of KV heads each rank has its own; above, tp / num_kv_heads ranks share
// one); the single MSA index key head is on every rank. With expert parallelism over the same ranks (vLLM's
// --enable-expert-parallel, TensorRT-LLM's TEP) each rank holds whole routed experts, an equal share of them,
// instead of a column slice of every expert; tokens stay on every rank, so the MoE output is summed over the
// ranks exactly as the column slices' partial sums are. With data-parallel attention (DEP: vLLM's
// --data-parallel-size with --enable-expert-parallel, TensorRT-LLM's enable_attention_dp) each rank holds the
// whole model but the routed experts, attends for its own sequences, and the MoE layers exchange tokens.
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"

namespace m3 {

// A half-open range [begin, end) of heads, columns or rows.
struct Slice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Slice&) const = default;
};

struct ShardLayout {
  int tp_size = 1, tp_rank = 0;
  Slice q_heads;              // query heads computed here (num_heads / tp)
  Slice kv_heads;             // KV heads held here (and MSA index query heads: one per KV group)
  Slice dense_intermediate;   // columns of gate / up (rows of down) of the dense MLP layers
  Slice shared_intermediate;  // the same for the shared expert
  Slice expert_intermediate;  // the same for each routed expert (all of it with expert parallelism)
  Slice experts;              // routed experts held here (all of them without expert parallelism)
  bool expert_parallel = false;
  Slice vocab;          // embedding / LM-head rows: ceil(vocab / tp) each, the last rank's shorter
  int kv_replicas = 1;  // ranks that hold each KV head (1 up to TP = num_kv_heads, tp / num_kv_heads above)
  int dp_size = 1, dp_rank = 0;  // data-parallel attention ranks (tp_size is then 1)
  int world_size() const { return tp_size * dp_size; }
  int world_rank() const { return dp_rank * tp_size + tp_rank; }
};

// The layout of rank `tp_rank` of `tp_size`, its routed experts split by expert (expert_parallel) or by
// column. Throws m3::Error(kInvalidArgument) naming --tensor-parallel-size (or --enable-expert-parallel) and
// the width that does not split (heads, KV heads, an MLP width, an MXFP8 scale block, the experts).
ShardLayout make_shard_layout(const ModelConfig& config, int tp_size, int tp_rank,
                              bool expert_parallel = false);

// DEP over `dp_size` ranks: rank `dp_rank` holds everything but the routed experts whole (tp 1) and an equal
// share of the experts. Throws m3::Error(kInvalidArgument) naming --data-parallel-size when the experts do
// not split.
ShardLayout make_dep_shard_layout(const ModelConfig& config, int dp_size, int dp_rank);

}  // namespace m3
