// Token sampling on the GPU: the rule of engine/sampler.h (the CPU reference) followed bit for bit, with the
// arithmetic shared through common/sampling_math.h. A cluster of up to 8 CTAs per row, fewer as rows grow,
// with double sums in an order that does not depend on that (so on the batch); the only difference from the
// CPU is that order, which can matter only when a draw or the top-p prefix lies within rounding of a
// boundary.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/sampling_math.h"

namespace m3::cuda {

// Samples rows [rows] of device logits [rows, vocab] (fp32; modified in place: each row's adjustment entries
// are applied to it, then its token mask). params: [rows] on the device; adjustments: the device array the
// rows' [adj_begin, adj_end) index (ids distinct within a row; may be null when every range is empty);
// token_masks: device rows of token_mask_words(vocab) words that rows with mask_row >= 0 index (null: every
// row unmasked); out: [rows] int32 ids on the device. Asynchronous on `stream`, no host synchronisation:
// capturable in a CUDA graph.
void sample_rows(float* logits, int rows, int vocab, const SamplingRow* params,
                 const LogitAdjustment* adjustments, int32_t* out, cudaStream_t stream,
                 const uint32_t* token_masks = nullptr);

}  // namespace m3::cuda
