// Slicing rules; every refusal names the flag and the width that does not divide.
#include "config/shard_layout.h"

#include <algorithm>

#include "common/error.h"

namespace m3 {
namespace {

[[noreturn]] void refuse(int tp, const std::string& why) {
  fail(ErrorKind::kInvalidArgument, "--tensor-parallel-size " + std::to_string(tp) + ": " + why);
}

// Rank r's equal share of `width`; MXFP8 weights also need each share to hold whole scale blocks.
Slice split(const ModelConfig& c, int tp, int rank, int64_t width, const char* what) {
  if (width % tp != 0)
    refuse(tp, std::string(what) + " (" + std::to_string(width) + ") does not split into " +
                   std::to_string(tp) + " equal parts");
  const int64_t per = width / tp;
  if (c.weight_quant == WeightQuant::kMxfp8 && per % c.quant_block != 0)
    refuse(tp, std::string(what) + " slices of " + std::to_string(per) +
                   " are not whole MXFP8 scale blocks of " + std::to_string(c.quant_block));
  return {rank * per, (rank + 1) * per};
}

}  // namespace

ShardLayout make_shard_layout(const ModelConfig& c, int tp, int rank, bool expert_parallel) {
  if (tp < 1) refuse(tp, "must be at least 1");
  if (rank < 0 || rank >= tp)
    fail(ErrorKind::kInternal, "tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(tp));
  ShardLayout s;
  s.tp_size = tp;
  s.tp_rank = rank;
  if (c.num_heads % tp != 0)
    refuse(tp,
           std::to_string(c.num_heads) + " query heads do not split into " + std::to_string(tp) + " ranks");
  const int64_t heads = c.num_heads / tp, group = c.group_size();
  s.q_heads = {rank * heads, (rank + 1) * heads};
  // A rank's query heads must cover whole KV groups (tp divides the KV heads) or lie inside one (the KV heads
  // divide tp, and that head is replicated on tp / num_kv_heads ranks).
  if (heads >= group ? heads % group != 0 : group % heads != 0)
    refuse(tp, std::to_string(c.num_kv_heads) + " KV heads neither split into nor divide " +
                   std::to_string(tp) + " ranks");
  s.kv_heads = {s.q_heads.begin / group, (s.q_heads.end + group - 1) / group};
  s.kv_replicas = heads >= group ? 1 : static_cast<int>(group / heads);
  s.dense_intermediate = split(c, tp, rank, c.dense_intermediate_size, "the dense MLP width");
  s.shared_intermediate = split(c, tp, rank, c.shared_intermediate_size, "the shared expert width");
  s.experts = {0, c.num_experts};
  s.expert_intermediate = {0, c.expert_intermediate_size};
  s.expert_parallel = expert_parallel && tp > 1;
  if (!s.expert_parallel) {
    s.expert_intermediate = split(c, tp, rank, c.expert_intermediate_size, "the routed expert width");
  } else if (c.num_experts % tp != 0) {
    fail(ErrorKind::kInvalidArgument,
         "--enable-expert-parallel over " + std::to_string(tp) + " ranks: " + std::to_string(c.num_experts) +
             " routed experts do not split into " + std::to_string(tp) + " equal groups");
  } else {
    const int64_t per = c.num_experts / tp;
    s.experts = {rank * per, (rank + 1) * per};
  }
  const int64_t vocab_per_rank = (static_cast<int64_t>(c.vocab_size) + tp - 1) / tp;
  s.vocab = {std::min<int64_t>(c.vocab_size, rank * vocab_per_rank),
             std::min<int64_t>(c.vocab_size, (rank + 1) * vocab_per_rank)};
  return s;
}

ShardLayout make_dep_shard_layout(const ModelConfig& c, int dp, int rank) {
  const std::string flag = "--data-parallel-size " + std::to_string(dp);
  if (dp < 1) fail(ErrorKind::kInvalidArgument, flag + ": must be at least 1");
  if (rank < 0 || rank >= dp)
    fail(ErrorKind::kInternal, "data-parallel rank " + std::to_string(rank) + " of " + std::to_string(dp));
  if (c.num_experts % dp != 0)
    fail(ErrorKind::kInvalidArgument,
         flag + " with --enable-expert-parallel: " + std::to_string(c.num_experts) +
             " routed experts do not split into " + std::to_string(dp) + " equal groups");
  ShardLayout s = make_shard_layout(c, 1, 0);
  s.dp_size = dp;
  s.dp_rank = rank;
  s.expert_parallel = dp > 1;
  const int64_t per = c.num_experts / dp;
  s.experts = {rank * per, (rank + 1) * per};
  return s;
}

}  // namespace m3
