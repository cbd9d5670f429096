// Partial NeoX (rotate-half) rotary embedding on the first rotary_dim dims of a head; the rest pass through.
// Frequencies and angles are computed in fp32 exactly as the reference does (inv_freq = 1 / theta^(2i/d),
// angle = float(pos) * inv_freq), with cos/sin correctly rounded from the fp32 angle.
#pragma once

#include <cstdint>
#include <vector>

namespace m3 {

class Rope {
 public:
  Rope(int rotary_dim, double theta);
  int rotary_dim() const { return rotary_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // cos/sin tables of rotary_dim / 2 entries for absolute position `pos`.
  void angles(int64_t pos, float* cos_out, float* sin_out) const;
  // Rotates one head vector in place with precomputed tables: x[i], x[i + d/2] form a pair.
  void apply(float* x, const float* cos_t, const float* sin_t) const;

 private:
  int rotary_dim_;
  std::vector<float> inv_freq_;
};

}  // namespace m3
