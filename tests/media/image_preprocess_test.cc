// The MiniMax-M3 image processor port: smart_resize against the Python formula (ties included), the uint8
// antialiased bicubic resize against hand-computed fixed-point weights and a double-precision reference, the
// float32 normalisation, and the patch layout of patchify(). Exact goldens from the Python processor come
// separately.
#include "media/image_preprocess.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/error.h"

namespace m3::media {
namespace {

constexpr int64_t kMin = 4 * 28 * 28;
constexpr int64_t kMax = 451584;

RgbImage make_image(int h, int w, uint32_t seed) {
  RgbImage img;
  img.height = h;
  img.width = w;
  img.pixels.resize(size_t(h) * w * 3);
  uint32_t s = seed;
  for (auto& v : img.pixels) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(s >> 24);
  }
  return img;
}

RgbImage constant_image(int h, int w, uint8_t value) {
  RgbImage img;
  img.height = h;
  img.width = w;
  img.pixels.assign(size_t(h) * w * 3, value);
  return img;
}

uint8_t at(const RgbImage& img, int y, int x, int c) {
  return img.pixels[(size_t(y) * img.width + x) * 3 + c];
}

ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

// Expected values below come from running the processor's Python smart_resize (factor 28, min 3136,
// max 451584) on these sizes.
TEST(SmartResize, RoundsHalfToEven) {
  EXPECT_EQ(smart_resize(70, 98, 28, kMin, kMax), std::make_pair(56, 112));  // 2.5 -> 2, 3.5 -> 4
  EXPECT_EQ(smart_resize(98, 70, 28, kMin, kMax), std::make_pair(112, 56));
  EXPECT_EQ(smart_resize(126, 154, 28, kMin, kMax), std::make_pair(112, 168));  // 4.5 -> 4, 5.5 -> 6
  EXPECT_EQ(smart_resize(42, 42, 28, kMin, kMax), std::make_pair(56, 56));      // 1.5 -> 2
}

TEST(SmartResize, KeepsMultiplesInRange) {
  EXPECT_EQ(smart_resize(672, 672, 28, kMin, kMax), std::make_pair(672, 672));
  EXPECT_EQ(smart_resize(56, 84, 28, kMin, kMax), std::make_pair(56, 84));
  EXPECT_EQ(smart_resize(28, 5600, 28, kMin, kMax), std::make_pair(28, 5600));  // ratio exactly 200
}

TEST(SmartResize, DownscalesPastMaxPixels) {
  EXPECT_EQ(smart_resize(1000, 2000, 28, kMin, kMax), std::make_pair(448, 924));
  EXPECT_EQ(smart_resize(2000, 1000, 28, kMin, kMax), std::make_pair(924, 448));
  EXPECT_EQ(smart_resize(4032, 3024, 28, kMin, kMax), std::make_pair(756, 560));
  EXPECT_EQ(smart_resize(1080, 1920, 28, kMin, kMax), std::make_pair(504, 896));
  EXPECT_EQ(smart_resize(700, 700, 28, kMin, kMax), std::make_pair(672, 672));
  EXPECT_EQ(smart_resize(14, 2800, 28, kMin, kMax), std::make_pair(28, 812));  // max(factor, ...) floor
}

TEST(SmartResize, UpscalesBelowMinPixels) {
  EXPECT_EQ(smart_resize(20, 30, 28, kMin, kMax), std::make_pair(56, 84));
  EXPECT_EQ(smart_resize(10, 10, 28, kMin, kMax), std::make_pair(56, 56));
  EXPECT_EQ(smart_resize(1, 200, 28, kMin, kMax), std::make_pair(28, 812));  // round(1/28) = 0 -> min branch
}

TEST(SmartResize, RejectsExtremeAspectRatioAndEmptySides) {
  EXPECT_EQ(kind_of([] { smart_resize(1, 201, 28, kMin, kMax); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { smart_resize(5000, 24, 28, kMin, kMax); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { smart_resize(0, 10, 28, kMin, kMax); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { smart_resize(10, -1, 28, kMin, kMax); }), ErrorKind::kInvalidArgument);
}

// 4 -> 2 samples (scale 2, support 4), worked by hand from torch's formulas: center = 1.0 for output 0, taps
// 0..3 at filter arguments (j - 0.5) / 2 = -0.25, 0.25, 0.75, 1.25 -> 0.8671875, 0.8671875, 0.2265625,
// -0.0703125 (a = -0.5); the sum 1.890625 normalises them to 0.458678, 0.458678, 0.119835, -0.037190. The
// largest, 0.458678, puts the precision at 16 (0.458678 * 2^17 >= 2^15 > 0.458678 * 2^16), so the int16
// weights are round(w * 65536) = 30060, 30060, 7853, -2437.
TEST(BicubicFilter, HandComputedDownscaleByTwo) {
  const AxisFilter f = bicubic_antialias_filter(4, 2);
  EXPECT_EQ(f.precision, 16);
  EXPECT_EQ(f.stride, 9);  // ceil(4) * 2 + 1
  ASSERT_EQ(f.first.size(), 2u);
  EXPECT_EQ(f.first, (std::vector<int>{0, 0}));
  EXPECT_EQ(f.count, (std::vector<int>{4, 4}));
  const std::vector<int16_t> row0(f.weights.begin(), f.weights.begin() + 4);
  const std::vector<int16_t> row1(f.weights.begin() + 9, f.weights.begin() + 13);
  EXPECT_EQ(row0, (std::vector<int16_t>{30060, 30060, 7853, -2437}));
  EXPECT_EQ(row1, (std::vector<int16_t>{-2437, 7853, 30060, 30060}));

  // (32768 + 10*30060 + 20*30060 + 30*7853 - 40*2437) >> 16 = 1072678 >> 16 = 16, and the mirror: 34.
  RgbImage row;
  row.height = 1;
  row.width = 4;
  row.pixels = {10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40};
  const RgbImage out = resize_bicubic_antialias(row, 1, 2);
  ASSERT_EQ(out.width, 2);
  ASSERT_EQ(out.height, 1);
  EXPECT_EQ(out.pixels, (std::vector<uint8_t>{16, 16, 16, 34, 34, 34}));
}

// At scale 1 the taps sit at filter arguments -1, 0, 1, 2 (fewer at the borders) where the cubic is 0, 1, 0,
// 0: the weight of sample i is 1.0 = 2^14 at precision 14 and every other weight is 0, so such a pass is the
// identity (and torchvision skips the call outright when both sides are unchanged).
TEST(BicubicFilter, ScaleOneIsIdentity) {
  for (int n : {1, 2, 3, 5, 17, 672}) {
    const AxisFilter f = bicubic_antialias_filter(n, n);
    EXPECT_EQ(f.precision, 14) << n;
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < f.count[i]; ++k) {
        const int16_t w = f.weights[size_t(i) * f.stride + k];
        EXPECT_EQ(w, f.first[i] + k == i ? 16384 : 0) << "n=" << n << " i=" << i << " k=" << k;
      }
    }
  }
  const RgbImage img = make_image(23, 31, 7);
  EXPECT_EQ(resize_bicubic_antialias(img, 23, 31).pixels, img.pixels);
}

TEST(BicubicResize, OutputDimensions) {
  const RgbImage img = make_image(37, 53, 1);
  for (auto [h, w] : {std::pair{28, 56}, {56, 28}, {1, 1}, {100, 300}, {37, 20}, {90, 53}}) {
    const RgbImage out = resize_bicubic_antialias(img, h, w);
    EXPECT_EQ(out.height, h);
    EXPECT_EQ(out.width, w);
    EXPECT_EQ(out.pixels.size(), size_t(h) * w * 3);
  }
}

TEST(BicubicResize, ConstantImageStaysConstant) {
  for (uint8_t v : {0, 1, 77, 128, 254, 255}) {
    const RgbImage img = constant_image(37, 53, v);
    for (auto [h, w] : {std::pair{28, 56}, {56, 28}, {5, 7}, {280, 140}, {300, 900}, {1, 1}, {37, 1000}}) {
      const RgbImage out = resize_bicubic_antialias(img, h, w);
      for (uint8_t got : out.pixels) ASSERT_EQ(got, v) << int(v) << " -> " << h << "x" << w;
    }
  }
}

// An unchanged side is not filtered: resizing only the width equals resizing each row as a 1-row image.
TEST(BicubicResize, UnchangedHeightIsHorizontalOnly) {
  const RgbImage img = make_image(9, 40, 3);
  const RgbImage out = resize_bicubic_antialias(img, 9, 17);
  for (int y = 0; y < img.height; ++y) {
    RgbImage row;
    row.height = 1;
    row.width = img.width;
    row.pixels.assign(img.pixels.begin() + size_t(y) * img.width * 3,
                      img.pixels.begin() + size_t(y + 1) * img.width * 3);
    const RgbImage r = resize_bicubic_antialias(row, 1, 17);
    for (int x = 0; x < 17; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(at(out, y, x, c), at(r, 0, x, c)) << y << "," << x << "," << c;
  }
}

// The real-valued resampling the reference approximates, written out directly: the PIL cubic (a = -0.5)
// stretched by max(scale, 1), centred at scale * (x + 0.5), over every input sample, normalised by its sum.
double ideal_sample(const std::vector<double>& in, int out_size, int x) {
  const double scale = double(in.size()) / out_size;
  const double stretch = std::max(scale, 1.0);
  const double center = scale * (x + 0.5);
  double num = 0.0, den = 0.0;
  for (size_t j = 0; j < in.size(); ++j) {
    const double d = std::abs((double(j) + 0.5 - center) / stretch);
    const double w = d < 1   ? 1.5 * d * d * d - 2.5 * d * d + 1
                     : d < 2 ? -0.5 * d * d * d + 2.5 * d * d - 4 * d + 2
                             : 0;
    num += w * in[j];
    den += w;
  }
  return num / den;
}

// Compared: the uint8 output against clamp(floor(ideal + 0.5)), i.e. the real-valued result rounded half up
// as (acc + 2^(p-1)) >> p does. The int16 weights are off by at most 2^-(p+1) each (p >= 14), which moves the
// sum by a few hundredths at most, so where the ideal is more than 0.1 from a rounding boundary the result
// must match exactly, and elsewhere within 1.
TEST(BicubicResize, OneRowMatchesDoublePrecisionReference) {
  int exact = 0, total = 0;
  for (auto [in_w, out_w] : {std::pair{40, 17}, {17, 40}, {100, 28}, {28, 100}, {7, 3}, {3, 56}, {560, 28}}) {
    const RgbImage img = make_image(1, in_w, uint32_t(in_w * 131 + out_w));
    const RgbImage out = resize_bicubic_antialias(img, 1, out_w);
    for (int c = 0; c < 3; ++c) {
      std::vector<double> in(in_w);
      for (int x = 0; x < in_w; ++x) in[x] = at(img, 0, x, c);
      for (int x = 0; x < out_w; ++x) {
        const double ideal = ideal_sample(in, out_w, x);
        const int want = static_cast<int>(std::clamp(std::floor(ideal + 0.5), 0.0, 255.0));
        const int got = at(out, 0, x, c);
        const double frac = ideal + 0.5 - std::floor(ideal + 0.5);
        const bool near_boundary = frac < 0.1 || frac > 0.9;
        if (near_boundary) {
          EXPECT_LE(std::abs(got - want), 1) << in_w << "->" << out_w << " x=" << x << " ideal=" << ideal;
        } else {
          EXPECT_EQ(got, want) << in_w << "->" << out_w << " x=" << x << " ideal=" << ideal;
        }
        exact += got == want;
        ++total;
      }
    }
  }
  EXPECT_GE(exact, total * 95 / 100);
}

// Same for a 1-column image: the vertical pass alone.
TEST(BicubicResize, OneColumnMatchesDoublePrecisionReference) {
  for (auto [in_h, out_h] : {std::pair{40, 17}, {17, 40}, {300, 56}}) {
    const RgbImage img = make_image(in_h, 1, uint32_t(in_h + 7 * out_h));
    const RgbImage out = resize_bicubic_antialias(img, out_h, 1);
    for (int c = 0; c < 3; ++c) {
      std::vector<double> in(in_h);
      for (int y = 0; y < in_h; ++y) in[y] = at(img, y, 0, c);
      for (int y = 0; y < out_h; ++y) {
        const double ideal = ideal_sample(in, out_h, y);
        const int want = static_cast<int>(std::clamp(std::floor(ideal + 0.5), 0.0, 255.0));
        EXPECT_LE(std::abs(at(out, y, 0, c) - want), 1) << in_h << "->" << out_h << " y=" << y;
      }
    }
  }
}

TEST(BicubicResize, RejectsBadInput) {
  RgbImage bad = make_image(4, 4, 1);
  bad.pixels.pop_back();
  EXPECT_EQ(kind_of([&] { resize_bicubic_antialias(bad, 2, 2); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { resize_bicubic_antialias(make_image(4, 4, 1), 0, 2); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { preprocess_image(bad); }), ErrorKind::kInvalidArgument);
}

// float32, in torch's order: mean and std times 255.0f, then (x - mean) / std.
float torch_normalize(uint8_t v, float mean, float stdv) {
  volatile float m = mean * 255.0f;  // volatile: no contraction into an FMA in this test either
  volatile float s = stdv * 255.0f;
  volatile float d = static_cast<float>(v) - m;
  return d / s;
}

TEST(Preprocess, DefaultMeanStdAreTheFloat32OfThePythonDoubles) {
  // torch.tensor([0.48145466, ...]) rounds Python doubles to float32; the config's float literals must agree.
  const ImageProcessorConfig cfg;
  const double mean[3] = {0.48145466, 0.4578275, 0.40821073};
  const double stdv[3] = {0.26862954, 0.26130258, 0.27577711};
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(cfg.mean[c], static_cast<float>(mean[c]));
    EXPECT_EQ(cfg.std[c], static_cast<float>(stdv[c]));
  }
}

TEST(Preprocess, NormalisesOnePixelInFloat32) {
  RgbImage img = constant_image(56, 56, 0);
  for (size_t i = 0; i < img.pixels.size(); i += 3) {
    img.pixels[i] = 128;
    img.pixels[i + 1] = 0;
    img.pixels[i + 2] = 255;
  }
  const ImageProcessorConfig cfg;
  const VisionPatches out = preprocess_image(img, cfg);
  ASSERT_EQ(out.h, 4);
  ASSERT_EQ(out.w, 4);
  const size_t plane = 14 * 14, chan = 2 * plane;
  const uint8_t px[3] = {128, 0, 255};
  for (int c = 0; c < 3; ++c) {
    const float want = torch_normalize(px[c], cfg.mean[c], cfg.std[c]);
    EXPECT_EQ(out.values[c * chan], want) << c;  // bit-exact float32
    EXPECT_NEAR(out.values[c * chan], (px[c] / 255.0 - double(cfg.mean[c])) / double(cfg.std[c]), 1e-5) << c;
  }
  EXPECT_NEAR(out.values[0], (128 / 255.0 - 0.48145466) / 0.26862954, 1e-5);  // 0.07803...
}

// 56 x 84 is already a multiple of 28 within the pixel range: no resize, grid 4 x 6. Channel 0 holds y,
// channel 1 holds x and channel 2 a mix, so every normalised value names the pixel it came from.
TEST(Preprocess, PatchOrder) {
  const int H = 56, W = 84, p = 14, m = 2, T = 2;
  RgbImage img;
  img.height = H;
  img.width = W;
  img.pixels.resize(size_t(H) * W * 3);
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x) {
      img.pixels[(size_t(y) * W + x) * 3 + 0] = static_cast<uint8_t>(y);
      img.pixels[(size_t(y) * W + x) * 3 + 1] = static_cast<uint8_t>(x);
      img.pixels[(size_t(y) * W + x) * 3 + 2] = static_cast<uint8_t>((7 * y + 3 * x) & 255);
    }
  }
  const ImageProcessorConfig cfg;
  const VisionPatches out = preprocess_image(img, cfg);
  ASSERT_EQ(out.t, 1);
  ASSERT_EQ(out.h, 4);
  ASSERT_EQ(out.w, 6);
  ASSERT_EQ(out.num_patches(), 24);
  const size_t row_len = size_t(3) * T * p * p;
  ASSERT_EQ(out.values.size(), 24 * row_len);

  // Byte value of channel c for a normalised value (the normalisation is strictly increasing).
  auto decode = [&](int c, float v) {
    for (int b = 0; b < 256; ++b)
      if (torch_normalize(static_cast<uint8_t>(b), cfg.mean[c], cfg.std[c]) == v) return b;
    return -1;
  };
  const int gw_m = (W / p) / m;
  for (int r = 0; r < 24; ++r) {
    // Rows in (gh/m, gw/m, m, m) order.
    const int mw = r % m, mh = (r / m) % m, bw = (r / (m * m)) % gw_m, bh = r / (m * m * gw_m);
    for (size_t e = 0; e < row_len; ++e) {
      // Each row is [C][T][p][p].
      const int pw = e % p, ph = (e / p) % p, t = (e / (p * p)) % T, c = int(e / (p * p * T));
      const int y = (bh * m + mh) * p + ph, x = (bw * m + mw) * p + pw;
      const float v = out.values[r * row_len + e];
      ASSERT_EQ(v, torch_normalize(at(img, y, x, c), cfg.mean[c], cfg.std[c]))
          << "row " << r << " elem " << e << " (c=" << c << " t=" << t << " y=" << y << " x=" << x << ")";
      if (c == 0) {
        ASSERT_EQ(decode(0, v), y);
      }
      if (c == 1) {
        ASSERT_EQ(decode(1, v), x);
      }
      if (t == 1) {
        ASSERT_EQ(v, out.values[r * row_len + e - p * p]) << "temporal copy, row " << r << " elem " << e;
      }
    }
  }
  // Spot checks: row 1 is the top-right patch of the first 2 x 2 window (y 0..13, x 14..27); row 2 its
  // bottom-left (y 14..27, x 0..13); row 4 the next window to the right (x 28..41).
  EXPECT_EQ(decode(1, out.values[1 * row_len + 1 * p * p * T + 0]), 14);
  EXPECT_EQ(decode(0, out.values[2 * row_len + 0]), 14);
  EXPECT_EQ(decode(1, out.values[4 * row_len + 1 * p * p * T + 0]), 28);
}

TEST(Preprocess, ResizesToTheSmartResizeGrid) {
  const RgbImage img = make_image(100, 150, 11);  // smart_resize -> 112 x 140
  const VisionPatches out = preprocess_image(img);
  EXPECT_EQ(out.t, 1);
  EXPECT_EQ(out.h, 8);
  EXPECT_EQ(out.w, 10);
  EXPECT_EQ(out.values.size(), size_t(80) * 3 * 2 * 14 * 14);
  // The first value is the normalised top-left pixel of the resized image.
  const RgbImage resized = resize_bicubic_antialias(img, 112, 140);
  const ImageProcessorConfig cfg;
  EXPECT_EQ(out.values[0], torch_normalize(at(resized, 0, 0, 0), cfg.mean[0], cfg.std[0]));
}

}  // namespace
}  // namespace m3::media
