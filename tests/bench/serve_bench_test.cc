// Request arrival times of the load generator: all at once for an infinite rate; otherwise gamma gaps
// rescaled so the last request goes out at n / rate (vLLM), evenly spaced for infinite burstiness, and the
// same for the same seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bench/serve_bench.h"

namespace m3::bench {
namespace {

TEST(BenchArrivalTimes, InfiniteRateSendsEverythingAtOnce) {
  EXPECT_EQ(arrival_times(5, kInfiniteRate, 1.0, 0), std::vector<double>(5, 0.0));
  EXPECT_TRUE(arrival_times(0, 10.0, 1.0, 0).empty());
}

TEST(BenchArrivalTimes, PoissonAndGammaArrivalsEndAtNOverRate) {
  for (const double burstiness : {1.0, 0.3, 4.0}) {
    const std::vector<double> t = arrival_times(50, 10.0, burstiness, 3);
    ASSERT_EQ(t.size(), 50u);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end())) << "burstiness " << burstiness;
    EXPECT_GT(t.front(), 0.0) << "burstiness " << burstiness;
    EXPECT_NEAR(t.back(), 5.0, 1e-9) << "burstiness " << burstiness;
    EXPECT_EQ(t, arrival_times(50, 10.0, burstiness, 3)) << "burstiness " << burstiness;
    EXPECT_NE(t, arrival_times(50, 10.0, burstiness, 4)) << "burstiness " << burstiness;
  }
}

TEST(BenchArrivalTimes, InfiniteBurstinessIsEvenlySpaced) {
  const std::vector<double> t = arrival_times(4, 2.0, kInfiniteRate, 0);
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.5 * double(i + 1), 1e-12) << i;
}

}  // namespace
}  // namespace m3::bench
