// Paged attention at the real widths (64 query / 4 KV heads, head_dim 128, page 128, MSA top-16): sparse
// decode (B = 1..64, L = 8K / 128K), dense decode (L = 8K), dense causal prefill of one 8K sequence and
// sparse prefill of an 8K-query chunk at the end of an 8K / 32K / 128K context with realistic selections
// (neighbouring tokens share most blocks). Floors: decode = K + V of the keys each (sequence, KV head)
// attends, read once; prefill = 4 x heads x dim FLOPs per attended key (the causal half for dense) on the
// bf16 tensor peak. Launches go through paged_attention (the launcher's own split-K choice, noted per row);
// attention_decode_splits re-times B = 1 decode at fixed split counts, to check the split heuristic;
// msa_prefill_layer times a whole MSA layer's chunked prefill (index scoring, selection, sparse attention).
// The decode rows run on bf16 and on FP8 pages ("kv=fp8": e4m3 + an fp32 scale per token and KV head, the
// floor counting those bytes); dense decode also at L = 128K, where the K/V bytes are the whole cost.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/kernels.h"

namespace m3::bench {
namespace {

using cuda::bf16;

constexpr int kHq = 64, kHkv = 4, kGroup = kHq / kHkv, kDim = 128, kPage = 128, kTopk = 16;
constexpr size_t kSlotElems = size_t(kHkv) * kDim;  // bf16 per cache slot (all KV heads)

template <typename T>
T* upload(Arena& a, const std::vector<T>& v) {
  T* d = a.get<T>(v.size());
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// Ascending distinct blocks: `local` plus up to topk - 1 of [0, local) (all of them when they fit).
std::vector<int32_t> random_selection(std::mt19937& rng, int local) {
  std::vector<int32_t> s;
  if (local + 1 <= kTopk) {
    for (int b = 0; b <= local; ++b) s.push_back(b);
    return s;
  }
  while (int(s.size()) < kTopk - 1) {
    const int32_t b = int32_t(rng() % local);
    if (std::find(s.begin(), s.end(), b) == s.end()) s.push_back(b);
  }
  s.push_back(local);
  std::sort(s.begin(), s.end());
  return s;
}

// Keys of the selected blocks a query at `pos` attends.
int64_t selected_keys(const std::vector<int32_t>& s, int pos) {
  int64_t n = 0;
  for (int32_t b : s) n += std::min<int64_t>(kPage, pos - int64_t(b) * kPage + 1);
  return n;
}

// Everything one paged_attention launch needs.
struct Problem {
  cuda::TokenMeta meta{};
  cuda::AttentionTiles tiles{};
  int T = 0, max_kv_len = 0;
  float* q = nullptr;
  bf16* out = nullptr;
  cuda::KvPages kv;        // bf16 or FP8 pages
  int32_t* sel = nullptr;  // null: dense
  float* ws = nullptr;
  int splits = 1;
};

// seqs[i] = (first position, token count); `table` is [S, max_blocks]; `pages` cache pages (random contents).
// `share`: take the cache, q, output and workspace of that problem (same token count and pages) instead.
Problem make_problem(Arena& a, const std::vector<std::pair<int, int>>& seqs,
                     const std::vector<int32_t>& table, int max_blocks, int pages,
                     const std::vector<int32_t>* selection, uint64_t seed, const Problem* share = nullptr,
                     bool fp8 = false) {
  Problem pr;
  std::vector<int32_t> seq, pos;
  std::vector<cuda::TokenRange> ranges;
  for (size_t i = 0; i < seqs.size(); ++i) {
    ranges.push_back({int32_t(seq.size()), seqs[i].second});
    for (int k = 0; k < seqs[i].second; ++k) {
      seq.push_back(int32_t(i));
      pos.push_back(seqs[i].first + k);
      pr.max_kv_len = std::max(pr.max_kv_len, seqs[i].first + k + 1);
    }
  }
  pr.T = int(pos.size());
  pr.meta = {upload(a, seq), upload(a, pos), upload(a, table), max_blocks};
  const cuda::AttentionPlan plan = cuda::plan_attention(ranges, kGroup, kDim);
  pr.tiles = {upload(a, plan.tiles), int(plan.tiles.size()), plan.max_tokens};
  if (selection) pr.sel = upload(a, *selection);
  const bool sparse = selection != nullptr;
  pr.splits =
      cuda::paged_attention_splits(pr.tiles, kHq, kHkv, kDim, kPage, sparse, kTopk, pr.max_kv_len, fp8);
  if (share != nullptr) {
    pr.kv = share->kv, pr.q = share->q, pr.out = share->out, pr.ws = share->ws;
    return pr;
  }
  const size_t cache = size_t(pages) * kPage * kSlotElems;
  if (fp8) {
    uint8_t *k8 = a.get<uint8_t>(cache), *v8 = a.get<uint8_t>(cache);
    float *ks = a.get<float>(cache / kDim), *vs = a.get<float>(cache / kDim);
    cuda::fill_random_e4m3(k8, int64_t(cache), seed << 40, 1.0f, nullptr);
    cuda::fill_random_e4m3(v8, int64_t(cache), (seed + 1) << 40, 1.0f, nullptr);
    a.fill_f32(ks, cache / kDim, 0.1f, seed + 3);
    a.fill_f32(vs, cache / kDim, 0.1f, seed + 4);
    pr.kv = {nullptr, nullptr, k8, v8, ks, vs};
  } else {
    bf16 *k = a.get<bf16>(cache), *v = a.get<bf16>(cache);
    a.fill_bf16(k, cache, 1.0f, seed);
    a.fill_bf16(v, cache, 1.0f, seed + 1);
    pr.kv = {k, v};
  }
  pr.q = a.get<float>(size_t(pr.T) * kHq * kDim);
  a.fill_f32(pr.q, size_t(pr.T) * kHq * kDim, 1.0f, seed + 2);
  pr.out = a.get<bf16>(size_t(pr.T) * kHq * kDim);
  const size_t ws = cuda::paged_attention_workspace_floats(pr.tiles, pr.T, kHq, kHkv, kDim, kPage, sparse,
                                                           kTopk, pr.max_kv_len, fp8);
  // Room for the fixed-split sweep too (32 splits at most).
  const size_t ws_max = std::max(ws, cuda::attention_workspace_floats(pr.T, kHq, kDim, 32));
  pr.ws = a.get<float>(ws_max);
  return pr;
}

// splits = 0: paged_attention's own choice; else that many (the workspace must be sized for it).
double time_problem(const Problem& pr, const Options& opts, int splits = 0) {
  const float scale = 0.08838834764831845f;  // 1 / sqrt(128)
  return time_us(
      [&](cudaStream_t s) {
        if (splits == 0)
          cuda::paged_attention(pr.q, pr.kv, pr.meta, pr.sel, kTopk, pr.tiles, pr.T, kHq, kHkv, kDim, kPage,
                                pr.max_kv_len, scale, pr.ws, pr.out, s);
        else
          cuda::paged_attention_with_splits(pr.q, pr.kv, pr.meta, pr.sel, kTopk, pr.tiles, pr.T, kHq, kHkv,
                                            kDim, kPage, splits, scale, pr.ws, pr.out, s);
      },
      nullptr, opts.iters);
}

std::string splits_note(int splits) {
  return "splits=" + std::to_string(splits);
}

// B decode rows at position L - 1, each (sequence, KV head) with its own random top-16 selection; `keys` =
// the selected keys summed over (sequence, KV head).
Problem sparse_decode_problem(Arena& a, int B, int L, double& keys, bool fp8 = false) {
  std::mt19937 rng(B * 7 + L);
  const int blocks = L / kPage;
  std::vector<int32_t> sel(size_t(B) * kHkv * kTopk, -1), table(size_t(B) * blocks, -1);
  int pages = 1;  // page 0 backs the blocks nobody selected (never read)
  keys = 0;
  for (int i = 0; i < B; ++i)
    for (int g = 0; g < kHkv; ++g) {
      const std::vector<int32_t> s = random_selection(rng, blocks - 1);
      keys += double(selected_keys(s, L - 1));
      std::copy(s.begin(), s.end(), sel.begin() + (size_t(i) * kHkv + g) * kTopk);
      for (int32_t b : s)
        if (table[size_t(i) * blocks + b] < 0) table[size_t(i) * blocks + b] = pages++;
    }
  for (int32_t& t : table) t = std::max(t, 0);
  std::vector<std::pair<int, int>> seqs(B, {L - 1, 1});
  return make_problem(a, seqs, table, blocks, pages, &sel, 100 + B, nullptr, fp8);
}

// B dense decode rows at position L - 1 (pages of the sequences interleaved).
Problem dense_decode_problem(Arena& a, int B, int L, bool fp8 = false) {
  const int blocks = L / kPage;
  std::vector<int32_t> table(size_t(B) * blocks);
  for (int i = 0; i < B; ++i)
    for (int b = 0; b < blocks; ++b) table[size_t(i) * blocks + b] = b * B + i;
  std::vector<std::pair<int, int>> seqs(B, {L - 1, 1});
  return make_problem(a, seqs, table, blocks, B * blocks, nullptr, 200 + B, nullptr, fp8);
}

// Bytes of one key's K and V rows of one KV head: bf16, or e4m3 plus two fp32 scales.
double kv_row_bytes(bool fp8) {
  return fp8 ? 2.0 * (kDim + 4) : 2.0 * kDim * 2;
}
std::string kv_note(bool fp8) {
  return fp8 ? " kv=fp8" : "";
}

M3_BENCH(attention_sparse_decode) {
  const std::vector<int> batches = {1, 8, 32, 64};
  const std::vector<int> lengths = {8192, 131072};
  for (bool fp8 : {false, true})
    for (int L : lengths)
      for (int B : batches) {
        const std::string shape =
            "B=" + std::to_string(B) + " L=" + std::to_string(L) + " top-16" + kv_note(fp8);
        if (!wanted(opts, "attention_sparse_decode", shape)) continue;
        Arena a;
        double keys = 0;
        const Problem pr = sparse_decode_problem(a, B, L, keys, fp8);
        Measurement m;
        m.kernel = "attention_sparse_decode";
        m.shape = shape;
        m.us = time_problem(pr, opts);
        m.bytes = keys * kv_row_bytes(fp8);  // K + V rows of the selected keys, per (sequence, KV head)
        m.flops = 4.0 * kGroup * kDim * keys;
        m.note = splits_note(pr.splits);
        report(m);
      }
}

M3_BENCH(attention_dense_decode) {
  const std::vector<int> batches = opts.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 64};
  for (bool fp8 : {false, true})
    for (int L : {8192, 131072})
      for (int B : batches) {
        if (L > 8192 && B > 32) continue;  // 128K x 64 sequences of bf16 K/V: 17 GB
        const std::string shape = "B=" + std::to_string(B) + " L=" + std::to_string(L) + kv_note(fp8);
        if (!wanted(opts, "attention_dense_decode", shape)) continue;
        Arena a;
        const Problem pr = dense_decode_problem(a, B, L, fp8);
        Measurement m;
        m.kernel = "attention_dense_decode";
        m.shape = shape;
        m.us = time_problem(pr, opts);
        m.bytes = double(B) * L * kHkv * kv_row_bytes(fp8);
        m.flops = 4.0 * kHq * kDim * L * B;
        m.note = splits_note(pr.splits);
        report(m);
      }
}

// B = 1 decode (sparse top-16 and dense, L = 8K) at fixed split counts; the note marks the launcher's choice.
M3_BENCH(attention_decode_splits) {
  struct Shape {
    bool sparse;
    int B, L;
  };
  for (bool fp8 : {false, true})
    for (const Shape& sh : {Shape{true, 1, 8192}, Shape{false, 1, 8192}, Shape{false, 8, 131072}})
      for (int splits : {1, 2, 4, 8, 12, 16, 24, 32}) {
        const std::string shape = std::string(sh.sparse ? "sparse top-16" : "dense") +
                                  " B=" + std::to_string(sh.B) + " L=" + std::to_string(sh.L) +
                                  " splits=" + std::to_string(splits) + kv_note(fp8);
        if (!wanted(opts, "attention_decode_splits", shape)) continue;
        Arena a;
        double keys = double(kHkv) * sh.L * sh.B;
        const Problem pr = sh.sparse ? sparse_decode_problem(a, sh.B, sh.L, keys, fp8)
                                     : dense_decode_problem(a, sh.B, sh.L, fp8);
        Measurement m;
        m.kernel = "attention_decode_splits";
        m.shape = shape;
        m.us = time_problem(pr, opts, splits);
        m.bytes = keys * kv_row_bytes(fp8);
        m.flops = 4.0 * kGroup * kDim * keys;
        m.note = splits == pr.splits ? "launcher's choice" : splits_note(pr.splits) + " chosen";
        report(m);
      }
}

M3_BENCH(attention_dense_prefill) {
  const int T = 8192, blocks = T / kPage;
  for (bool fp8 : {false, true}) {
    const std::string shape = "T=" + std::to_string(T) + " causal" + kv_note(fp8);
    if (!wanted(opts, "attention_dense_prefill", shape)) continue;
    Arena a;
    std::vector<int32_t> table(blocks);
    for (int b = 0; b < blocks; ++b) table[b] = b;
    const Problem pr = make_problem(a, {{0, T}}, table, blocks, blocks, nullptr, 300, nullptr, fp8);
    Measurement m;
    m.kernel = "attention_dense_prefill";
    m.shape = shape;
    m.us = time_problem(pr, opts);
    m.bytes = double(T) * (kHkv * kv_row_bytes(fp8) + kHq * kDim * (4 + 2));  // K, V, q (fp32), out (bf16)
    m.flops = 4.0 * kHq * kDim * (double(T) * (T + 1) / 2);
    m.note = splits_note(pr.splits) + "; floor: bf16 tensor peak";
    report(m);
  }
}

// Selections of a prefill chunk: per KV head and 128-query block, a base set of earlier blocks; each token
// keeps it with an occasional swap of one block (neighbouring tokens share most blocks), plus its local
// block.
std::vector<int32_t> prefill_selection(std::mt19937& rng, int first_pos, int Q, double& keys) {
  std::vector<int32_t> sel(size_t(Q) * kHkv * kTopk, -1);
  keys = 0;
  for (int g = 0; g < kHkv; ++g) {
    std::vector<int32_t> base;
    int base_local = -1;
    for (int t = 0; t < Q; ++t) {
      const int pos = first_pos + t, local = pos / kPage;
      if (local != base_local) base = random_selection(rng, local), base_local = local;
      std::vector<int32_t> s = base;
      if (local + 1 > kTopk && rng() % 8 == 0) {  // swap one earlier block for another unselected one
        const int32_t b = int32_t(rng() % local);
        if (std::find(s.begin(), s.end(), b) == s.end()) {
          s[rng() % (s.size() - 1)] = b;
          std::sort(s.begin(), s.end());
        }
      }
      keys += double(selected_keys(s, pos));
      std::copy(s.begin(), s.end(), sel.begin() + (size_t(t) * kHkv + g) * kTopk);
    }
  }
  return sel;
}

M3_BENCH(attention_sparse_prefill) {
  const int Q = 8192;
  const std::vector<int> contexts = {8192, 32768, 131072};
  for (int ctx : contexts) {
    const std::string shape = "Q=" + std::to_string(Q) + " ctx=" + std::to_string(ctx) + " top-16";
    if (!wanted(opts, "attention_sparse_prefill", shape)) continue;
    Arena a;
    std::mt19937 rng(ctx);
    const int blocks = ctx / kPage;
    std::vector<int32_t> table(blocks);
    for (int b = 0; b < blocks; ++b) table[b] = b;
    double keys = 0;
    const std::vector<int32_t> sel = prefill_selection(rng, ctx - Q, Q, keys);
    const Problem pr = make_problem(a, {{ctx - Q, Q}}, table, blocks, blocks, &sel, 400);
    Measurement m;
    m.kernel = "attention_sparse_prefill";
    m.shape = shape;
    m.us = time_problem(pr, opts);
    m.bytes = double(ctx) * kHkv * kDim * 2 * 2 + double(Q) * kHq * kDim * (4 + 2);
    m.flops = 4.0 * kGroup * kDim * keys;
    m.note = splits_note(pr.splits) + "; floor: bf16 tensor peak on the selected keys";
    report(m);
  }
}

// One MSA layer's prefill of an L-token prompt in 8K-token chunks, as the server runs it: per chunk the index
// scoring of its queries against the index keys so far, the top-16 selection and the sparse attention, all
// chunks timed together (one graph). The attention reads synthetic selections in which neighbouring tokens
// share most blocks (prefill_selection): the selection kernel's output on random index data would make every
// token's choice independent, which a trained indexer's are not; the scores and selections are computed all
// the same. Floor: the scoring FLOPs (causal) plus the attention FLOPs on the selected keys.
M3_BENCH(msa_prefill_layer) {
  constexpr int kChunk = 8192, kIndexHeads = kHkv, kIndexDim = 128;
  for (int L : {8192, 32768, 131072}) {
    const std::string shape = "L=" + std::to_string(L) + " in 8K chunks";
    if (!wanted(opts, "msa_prefill_layer", shape)) continue;
    Arena a;
    std::mt19937 rng(L + 5);
    const int blocks = L / kPage;
    std::vector<int32_t> table(blocks);
    for (int b = 0; b < blocks; ++b) table[b] = b;
    bf16* index_cache = a.get<bf16>(size_t(blocks) * kPage * kIndexDim);
    a.fill_bf16(index_cache, size_t(blocks) * kPage * kIndexDim, 1.0f, 601);
    float* index_q = a.get<float>(size_t(kChunk) * kIndexHeads * kIndexDim);
    a.fill_f32(index_q, size_t(kChunk) * kIndexHeads * kIndexDim, 1.0f, 602);
    float* scores = a.get<float>(size_t(kChunk) * kIndexHeads * blocks);
    int32_t* chosen = a.get<int32_t>(size_t(kChunk) * kIndexHeads * kTopk);
    std::vector<Problem> chunks;
    chunks.reserve(L / kChunk);
    double flops = 0;
    for (int first = 0; first < L; first += kChunk) {
      double keys = 0;
      const std::vector<int32_t> sel = prefill_selection(rng, first, kChunk, keys);
      chunks.push_back(make_problem(a, {{first, kChunk}}, table, blocks, blocks, &sel, 700,
                                    chunks.empty() ? nullptr : &chunks.front()));
      flops += 4.0 * kGroup * kDim * keys +
               2.0 * kIndexDim * kIndexHeads * (double(first) * kChunk + double(kChunk) * (kChunk + 1) / 2);
    }
    const float scale = 0.08838834764831845f;  // 1 / sqrt(128)
    Measurement m;
    m.kernel = "msa_prefill_layer";
    m.shape = shape;
    m.us = time_us(
        [&](cudaStream_t s) {
          for (const Problem& pr : chunks) {
            cuda::msa_block_scores(index_q, index_cache, pr.meta, kChunk, kIndexHeads, kIndexDim, kPage,
                                   blocks, scores, s, kChunk);
            cuda::msa_select(scores, pr.meta, kChunk, kIndexHeads, blocks, kPage, kTopk, 1, 0, chosen, s);
            cuda::paged_attention(pr.q, pr.kv, pr.meta, pr.sel, kTopk, pr.tiles, pr.T, kHq, kHkv, kDim, kPage,
                                  pr.max_kv_len, scale, pr.ws, pr.out, s);
          }
        },
        nullptr, opts.iters);
    m.bytes = double(L) * (kIndexDim + 2 * kSlotElems) * 2;  // index keys, K and V read at least once
    m.flops = flops;
    m.note = "score + select + sparse attention per chunk; dense: tools/gpu/dense_reference.py";
    report(m);
  }
}

}  // namespace
}  // namespace m3::bench
