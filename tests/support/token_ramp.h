// Distinct token ids for scheduling and page-pool tests: first, first + 1, ... (n of them).
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace m3::testing {

inline std::vector<int32_t> token_ramp(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace m3::testing
