// Rotary tables; the two-step fp32 rounding of inv_freq mirrors `1.0 / (base ** (arange / dim))` in fp32.
#include "model/rope.h"

#include <cmath>

namespace m3 {

Rope::Rope(int rotary_dim, double theta) : rotary_dim_(rotary_dim) {
  const float base = static_cast<float>(theta);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv_freq_.push_back(1.0f / p);
  }
}

void Rope::angles(int64_t pos, float* c, float* s) const {
  const float fp = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    float a = fp * inv_freq_[i];
    c[i] = static_cast<float>(std::cos(static_cast<double>(a)));
    s[i] = static_cast<float>(std::sin(static_cast<double>(a)));
  }
}

void Rope::apply(float* x, const float* c, const float* s) const {
  const int half = rotary_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i] + a * s[i];
  }
}

}  // namespace m3
