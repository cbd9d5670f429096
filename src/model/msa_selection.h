// MiniMax Sparse Attention block selection (spec §3.5.3): for one query token and one KV group, which KV
// blocks it attends. Blocks are anchored at absolute positions; the query's block L and the init blocks are
// forced; the remaining budget goes to the highest block scores among visible blocks (ties: lower id first).
// Future blocks (> L) are never eligible. This function is the single definition both backends check against.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"

namespace m3 {

// block_scores[b] for b in [0, query_block]: max over visible tokens of the block of <index_q, index_k>.
// Writes the selected block ids to *out in ascending order (exactly min(topk, query_block + 1) of them).
void select_blocks(const float* block_scores, int64_t query_block, const MsaConfig& msa,
                   std::vector<int32_t>* out);

}  // namespace m3
