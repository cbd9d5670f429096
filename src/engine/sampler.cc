// The CPU reference sampler: adjustment lists, the filter rule of sampler.h and the ascending-id draw, plus
// log-probabilities. Written for reading, not speed; the CUDA kernel follows the same rule.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"

namespace m3 {

bool needs_adjustment(const SamplingParams& p) {
  return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

Penalties penalties_of(const SamplingParams& p) {
  return {p.repetition_penalty, p.presence_penalty, p.frequency_penalty};
}

std::vector<LogitAdjustment> logit_adjustments(const SamplingParams& p, const PenaltyState& st,
                                               std::span<const int32_t> banned, int32_t vocab) {
  // Four sources, each ascending by id, merged in one walk.
  static const std::vector<int32_t> kNone;
  const std::vector<int32_t>& prompt = p.repetition_penalty != 1.0f ? st.prompt_tokens : kNone;
  const bool counts =
      p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  std::vector<int32_t> bans(banned.begin(), banned.end());
  std::sort(bans.begin(), bans.end());
  auto bias = p.logit_bias.begin();
  auto count = counts ? st.output_counts.begin() : st.output_counts.end();
  auto in_prompt = prompt.begin();
  auto ban = bans.begin();
  std::vector<LogitAdjustment> out;
  for (;;) {
    int64_t id = INT64_MAX;
    if (bias != p.logit_bias.end()) id = std::min<int64_t>(id, bias->first);
    if (count != st.output_counts.end()) id = std::min<int64_t>(id, count->first);
    if (in_prompt != prompt.end()) id = std::min<int64_t>(id, *in_prompt);
    if (ban != bans.end()) id = std::min<int64_t>(id, *ban);
    if (id == INT64_MAX) break;
    LogitAdjustment a;
    a.id = static_cast<int32_t>(id);
    if (bias != p.logit_bias.end() && bias->first == id) a.bias = (bias++)->second;
    if (count != st.output_counts.end() && count->first == id) a.output_count = (count++)->second;
    for (; in_prompt != prompt.end() && *in_prompt == id; ++in_prompt) a.in_prompt = 1;
    for (; ban != bans.end() && *ban == id; ++ban) a.banned = 1;
    if (id >= 0 && id < vocab) out.push_back(a);
  }
  return out;
}

void apply_logit_adjustments(std::span<float> logits, std::span<const LogitAdjustment> entries,
                             const Penalties& penalties) {
  for (const LogitAdjustment& a : entries)
    if (a.id >= 0 && static_cast<size_t>(a.id) < logits.size())
      logits[a.id] = adjust_logit(logits[a.id], a, penalties);
}

void adjust_logits(std::span<float> logits, const SamplingParams& p, const PenaltyState& st,
                   std::span<const int32_t> banned) {
  apply_logit_adjustments(logits, logit_adjustments(p, st, banned, static_cast<int32_t>(logits.size())),
                          penalties_of(p));
}

SamplingRow sampling_row(const SamplingParams& p, double u, int32_t adj_begin, int32_t adj_end) {
  SamplingRow row;
  row.temperature = p.temperature;
  row.top_p = p.top_p;
  row.top_k = p.top_k;
  row.min_p = p.min_p;
  row.penalties = penalties_of(p);
  row.u = u;
  row.adj_begin = adj_begin;
  row.adj_end = adj_end;
  return row;
}

int32_t sample_token(const float* logits, int32_t vocab, const SamplingRow& s, SampleMargins* margins) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (sort_key(logits[i]) > sort_key(logits[best])) best = i;
  const float max_logit = logits[best];
  if (!(s.temperature > 0.0f) || !std::isfinite(max_logit)) return best;

  // Top-k / top-p need the order (descending logit, ties by ascending id) of their candidates only.
  std::vector<int32_t> order;
  const bool top_k = s.top_k > 0 && s.top_k < vocab;
  if (top_k || s.top_p < 1.0f) {
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0);
    auto before = [&](int32_t a, int32_t b) {
      const uint32_t ka = sort_key(logits[a]), kb = sort_key(logits[b]);
      return ka != kb ? ka > kb : a < b;
    };
    if (top_k) {
      std::partial_sort(order.begin(), order.begin() + s.top_k, order.end(), before);
      order.resize(s.top_k);
    } else {
      std::sort(order.begin(), order.end(), before);
    }
  }
  std::vector<double> prob(vocab, 0.0);
  std::vector<char> keep(vocab, order.empty());
  if (order.empty()) {
    for (int32_t i = 0; i < vocab; ++i) prob[i] = token_probability(logits[i], max_logit, s.temperature);
  } else {
    double mass = 0;
    for (int32_t id : order) mass += prob[id] = token_probability(logits[id], max_logit, s.temperature);
    size_t n = order.size();
    if (s.top_p < 1.0f) {
      const double target = static_cast<double>(s.top_p) * mass;
      double prefix = 0;
      for (n = 0; n < order.size();) {
        const double before = prefix;
        prefix += prob[order[n++]];
        if (prefix >= target) {
          if (margins) margins->top_p = std::min(prefix - target, target - before) / mass;
          break;
        }
      }
      if (margins && prefix < target) margins->top_p = 0;  // rounding left the whole top-k short of target
    }
    for (size_t i = 0; i < n; ++i) keep[order[i]] = 1;
  }
  double kept_mass = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    keep[i] = keep[i] && prob[i] > 0.0 && prob[i] >= static_cast<double>(s.min_p);
    if (keep[i]) kept_mass += prob[i];
  }
  const double r = s.u * kept_mass;
  double running = 0;
  int32_t last = best;
  for (int32_t i = 0; i < vocab; ++i) {
    if (!keep[i]) continue;
    const double before = running;
    running += prob[i];
    last = i;
    if (running > r) {
      if (margins) margins->draw = std::min(r - before, running - r) / kept_mass;
      return i;
    }
  }
  if (margins) margins->draw = 0;
  return last;
}

int32_t sample_token(const float* logits, int32_t vocab, const SamplingParams& params, double u) {
  return sample_token(logits, vocab, sampling_row(params, u));
}

void apply_token_mask(std::span<float> logits, const uint32_t* mask) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!token_mask_allows(mask, static_cast<int32_t>(i)))
      logits[i] = -std::numeric_limits<float>::infinity();
}

std::vector<int32_t> sample_rows(std::span<float> logits, int32_t vocab, std::span<const SamplingRow> rows,
                                 std::span<const LogitAdjustment> adjustments,
                                 std::vector<SampleMargins>* margins, std::span<const uint32_t> token_masks) {
  if (vocab <= 0 || logits.size() != rows.size() * static_cast<size_t>(vocab))
    fail(ErrorKind::kInternal, "sample_rows: logits do not hold one row of the vocabulary per sampling row");
  std::vector<int32_t> ids(rows.size());
  if (margins) margins->assign(rows.size(), {});
  for (size_t r = 0; r < rows.size(); ++r) {
    const SamplingRow& row = rows[r];
    if (row.adj_begin < 0 || row.adj_begin > row.adj_end ||
        static_cast<size_t>(row.adj_end) > adjustments.size())
      fail(ErrorKind::kInternal, "sample_rows: adjustment range out of bounds");
    std::span<float> l = logits.subspan(r * vocab, vocab);
    apply_logit_adjustments(l, adjustments.subspan(row.adj_begin, row.adj_end - row.adj_begin),
                            row.penalties);
    if (row.mask_row >= 0) {
      const size_t words = token_mask_words(vocab);
      if ((static_cast<size_t>(row.mask_row) + 1) * words > token_masks.size())
        fail(ErrorKind::kInternal, "sample_rows: token-mask row out of bounds");
      apply_token_mask(l, token_masks.data() + row.mask_row * words);
    }
    ids[r] = sample_token(l.data(), vocab, row, margins ? &(*margins)[r] : nullptr);
  }
  return ids;
}

TokenLogprobs compute_logprobs(const float* logits, int32_t vocab, int32_t chosen, int top_k) {
  float mx = logits[0];
  for (int32_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  TokenLogprobs out;
  out.logprob = logits[chosen] - log_z;
  if (top_k > 0) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    const int k = std::min(top_k, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int i = 0; i < k; ++i) out.top.push_back({ids[i], logits[ids[i]] - log_z});
  }
  return out;
}

}  // namespace m3
