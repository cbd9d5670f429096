// Selection by partial sort of the non-forced visible blocks; NaN scores rank lowest so a poisoned score can
// never displace a real block or break the ordering.
#include "model/msa_selection.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace m3 {

void select_blocks(const float* scores, int64_t query_block, const MsaConfig& msa,
                   std::vector<int32_t>* out) {
  out->clear();
  const int64_t visible = query_block + 1;
  if (visible <= msa.topk_blocks) {
    for (int64_t b = 0; b < visible; ++b) out->push_back(static_cast<int32_t>(b));
    return;
  }
  const int64_t local_first = std::max<int64_t>(0, query_block - msa.local_blocks + 1);
  auto forced = [&](int64_t b) { return b < msa.init_blocks || b >= local_first; };

  std::vector<int32_t> candidates;
  for (int64_t b = 0; b < visible; ++b) {
    if (forced(b))
      out->push_back(static_cast<int32_t>(b));
    else
      candidates.push_back(static_cast<int32_t>(b));
  }
  const size_t budget = static_cast<size_t>(msa.topk_blocks) - out->size();
  auto key = [&](int32_t b) {
    float s = scores[b];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  auto better = [&](int32_t a, int32_t b) { return key(a) != key(b) ? key(a) > key(b) : a < b; };
  const size_t take = std::min(budget, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + take, candidates.end(), better);
  out->insert(out->end(), candidates.begin(), candidates.begin() + take);
  std::sort(out->begin(), out->end());
}

}  // namespace m3
