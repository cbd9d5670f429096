// Encoding one long text on several threads: how many threads a text gets, where a text may be cut so that
// encoding the pieces and concatenating their ids gives exactly the ids of the whole, and the process-wide
// pool of worker threads that runs the pieces. The pool is shared by every Tokenizer and every caller;
// a caller always works on its own job too, so a busy pool slows a job down but never blocks it.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

namespace m3::tok {

class AddedTokens;
class Normalizer;
class PreTokenizer;

// Texts shorter than this keep the single-threaded path: a thread's start-up would cost more than it saves.
inline constexpr size_t kParallelMinBytes = size_t{256} << 10;
// A text gets at most one thread per this many bytes.
inline constexpr size_t kBytesPerThread = size_t{64} << 10;
// Upper bound on threads (and on the pool), whatever M3_TOKENIZER_THREADS says.
inline constexpr size_t kMaxEncodeThreads = 256;

// M3_TOKENIZER_THREADS when set to a positive integer (1 turns parallel encoding off), else the hardware's
// thread count; read on every call, so a test can change it between encodes.
size_t max_encode_threads();

// Threads for a text of `text_bytes` when at most `max_threads` may be used: 1 below kParallelMinBytes,
// else min(max_threads, text_bytes / kBytesPerThread), at least 2.
size_t encode_threads(size_t text_bytes, size_t max_threads);

// The first offset q >= from (q > 0) where `text` (valid UTF-8, one stretch between raw-stage added tokens)
// may be cut, or npos. At q, with b the code point before it, a the one at it and c the one after:
// - `normalizer` calls b, a and c inert starters, so normalize(text) == normalize(text[0, q)) +
//   normalize(text[q, end)), the first normalized piece ends with b and the second starts with a;
// - `pre_tokenizer` splits between b and a, so the words of the normalized text are the words of the first
//   normalized piece followed by those of the second.
// BPE then sees the same words, and the ids of the pieces concatenate to those of the text. This says
// nothing about added tokens of the normalized stage: a caller cuts only when there are none.
size_t next_cut(std::string_view text, size_t from, const Normalizer& normalizer,
                const PreTokenizer& pre_tokenizer);

// Start offsets of the pieces `text` is cut into: 0, then the first cut (next_cut) at or after `piece_bytes`
// past the previous start, and so on. One start (0) when no cut is allowed.
std::vector<size_t> cut_points(std::string_view text, size_t piece_bytes, const Normalizer& normalizer,
                               const PreTokenizer& pre_tokenizer);

// Start offsets of about `pieces` equal parts of `text` (any bytes) for UTF-8 validation and the raw-stage
// added-token split, which then run on each part alone: every cut is before an ASCII byte, which no UTF-8
// sequence (well-formed or not) runs across, so find_invalid_utf8() of the text is the first answer of the
// parts in order; and added.splits_at() the cut for the raw stage. One start (0) when no cut is allowed.
std::vector<size_t> raw_cut_points(std::string_view text, size_t pieces, const AddedTokens& added);

// Runs task(i) for every i in [0, n) on the calling thread and up to threads - 1 pool threads; returns when
// all are done. Tasks run in any order, concurrently. The first exception a task throws is rethrown here
// (tasks not yet started then do not run).
void run_parallel(size_t n, size_t threads, const std::function<void(size_t)>& task);

}  // namespace m3::tok
