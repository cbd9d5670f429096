// What one forward pass computes: a flat list of new tokens from several sequences, each sequence's chunk
// continuing at an absolute position with the KV pages (block table) that cover it. Plain data: the engine
// builds it from the scheduler's StepPlan; backends read it and know nothing of requests.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/sampling_math.h"

namespace m3 {

struct SeqChunk {
  int32_t token_offset = 0;  // first token of this chunk in ForwardBatch::token_ids
  int32_t num_tokens = 0;
  int64_t start_pos = 0;  // absolute position of the first token = tokens already in the KV cache
  std::span<const int32_t> block_table;  // page ids covering positions [0, start_pos + num_tokens)
  bool want_logits = false;              // return logits of the chunk's last token
  int64_t seq_id = 0;                    // the engine's id of the sequence (stable across preemption)
  int32_t dp_rank = 0;  // the data-parallel attention rank that holds its KV (block_table is that rank's)
};

// A copy of one KV page (K, V and index keys of every layer) between the device pool and the prefix cache's
// host tier (kv/host_tier.h).
struct KvPageCopy {
  int32_t page = 0;       // device pool page id
  int32_t host_slot = 0;  // host tier slot id
  int32_t to_host = 0;    // 1: page -> slot (spill); 0: slot -> page (restore)
};

struct ForwardBatch {
  // Run first, in order: the host tier copies the scheduler queued since the last forward pass.
  std::vector<KvPageCopy> page_copies;
  std::vector<int32_t> token_ids;
  std::vector<SeqChunk> seqs;
  // Tokens whose input embedding is given instead of looked up (image / video placeholders: the vision
  // tower's features): embed_rows[i] indexes token_ids (ascending), its hidden_size values are embed_values[i
  // * hidden, (i + 1) * hidden). They replace the embedding after the vocabulary lookup.
  std::vector<int32_t> embed_rows;
  std::vector<float> embed_values;
  // Optional, only for backends that sample on their device (ModelBackend::samples_on_device): one row per
  // logits row, in batch order, each with its entries [adj_begin, adj_end) of sampling_adjustments. The
  // backend then returns ForwardOutput::sampled (the rule of engine/sampler.h) and need not return logits.
  std::vector<SamplingRow> sampling;
  std::vector<LogitAdjustment> sampling_adjustments;
  // Optional, with `sampling`: the token-mask rows (token_mask_words(vocab) words each) that rows with
  // mask_row >= 0 index. A function because the engine computes the masks on the host while the forward pass
  // runs: a backend calls it right before it samples (it blocks until they are ready). Not sent to the other
  // ranks: theirs sample unmasked, and only rank 0's ids are used.
  std::function<const std::vector<uint32_t>&()> token_masks;
};

// Calls f(first_row, rows, values) for each run of consecutive embed_rows (one per image in a prefill chunk,
// usually), values pointing at the run's first row of embed_values. kInternal when the rows are not ascending
// or the values are not rows x hidden.
void for_each_embed_run(const ForwardBatch& batch, int hidden,
                        const std::function<void(int32_t first_row, int32_t rows, const float* values)>& f);

// Blocks one token attends in one MSA layer: [kv group] -> ascending block ids.
using BlockSelection = std::vector<std::vector<int32_t>>;

struct ForwardOutput {
  int32_t vocab = 0;
  std::vector<float> logits;     // [rows, vocab], one row per SeqChunk with want_logits, in batch order
  std::vector<int32_t> sampled;  // [rows] token ids, when the batch carried sampling rows
  // Optional trace (ForwardOptions::trace_hidden): per logits row, the last token's residual stream after the
  // embedding and after each decoder layer ([num_layers + 1][hidden]).
  std::vector<std::vector<std::vector<float>>> hidden_trace;
  // Optional trace (ForwardOptions::trace_msa): [layer][token of the batch] -> selection (empty for dense
  // layers).
  std::vector<std::vector<BlockSelection>> msa_trace;
  // Optional trace (ForwardOptions::trace_moe): [layer][token of the batch] -> chosen experts, ascending
  // (empty for dense-FFN layers).
  std::vector<std::vector<std::vector<int32_t>>> moe_trace;
};

struct ForwardOptions {
  bool trace_hidden = false;
  bool trace_msa = false;
  bool trace_moe = false;
};

// Data-parallel attention: how a batch splits over the DP ranks. The engine groups the seqs by
// SeqChunk::dp_rank in rank order, so each rank's tokens and logits rows are contiguous ranges.
struct DpSplit {
  std::vector<int32_t> token_begin;  // [dp + 1]: rank r's tokens are [token_begin[r], token_begin[r + 1])
  std::vector<int32_t> row_begin;    // [dp + 1]: the same for the logits (and sampling) rows
  std::vector<int32_t> seq_begin;    // [dp + 1]: the same for the seqs
  int32_t tokens(int r) const { return token_begin[r + 1] - token_begin[r]; }
  int32_t rows(int r) const { return row_begin[r + 1] - row_begin[r]; }
};
// kInternal when the seqs are not grouped in rank order or a rank is out of [0, dp).
DpSplit split_by_dp_rank(const ForwardBatch& batch, int dp);
// Rank r's part as a batch of its own (token offsets rebased; the page copies and, on rank 0, the token
// masks kept; sampling adjustments kept whole, so the rows' ranges stay valid).
ForwardBatch dp_local_batch(const ForwardBatch& batch, const DpSplit& split, int r);

// A forward call as bytes, for the other ranks of a multi-rank model (dist/rank_protocol.h).
std::string encode_forward_call(const ForwardBatch& batch, const ForwardOptions& options);

// A decoded call: the batch's block tables live here (the SeqChunk spans point into them; moving a
// ForwardCall keeps them valid).
struct ForwardCall {
  ForwardBatch batch;
  ForwardOptions options;
  std::vector<std::vector<int32_t>> block_tables;
};
ForwardCall decode_forward_call(const std::string& bytes);  // kInternal on a malformed call

}  // namespace m3
