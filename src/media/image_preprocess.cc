// The released MiniMax-M3 image processor in plain scalar C++: smart_resize, torchvision's uint8 antialiased
// bicubic resize reproduced integer for integer (fixed-point int16 weights, horizontal then vertical pass),
// float32 rescale + normalise in torch's order, and the patch layout of the processor's patchify().
#include "media/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace m3::media {
namespace {

// Keeps the optimiser from fusing the multiplication that produced `v` into a later add (an FMA the reference
// does not execute), whatever -ffp-contract and -march the project is built with.
template <typename T>
inline T opaque(T v) {
  asm volatile("" : "+m"(v));
  return v;
}

// PIL's / torch's antialias cubic filter with Keys' a = -0.5 (HelperInterpCubic::aa_filter<double, true>).
// The reference evaluates ((a + 2) x - (a + 3)) x x + 1 and ((a x - 5a) x + 8a) x - 4a in double inside a
// translation unit built with -mavx2 -mfma, where GCC (and clang's default -ffp-contract=on, these being
// single expressions) turns each multiply whose only use is an add into an FMA; written out here as those
// FMAs. The fused and unfused forms differ by an ulp of a double at most: over all 150,000 (in, out) pairs
// with in <= 3000 and out a multiple of 28 up to 1400, not one int16 weight comes out different.
double keys_cubic(double x) {
  x = std::abs(x);
  if (x < 1.0) return std::fma(std::fma(1.5, x, -2.5) * x, x, 1.0);
  if (x < 2.0) return std::fma(std::fma(std::fma(-0.5, x, 2.5), x, -4.0), x, 2.0);
  return 0.0;
}

// Python's round() on a float: round half to even.
int64_t round_half_even(double v) {
  double f = std::floor(v);
  double diff = v - f;
  if (diff > 0.5 || (diff == 0.5 && std::fmod(f, 2.0) != 0.0)) f += 1.0;
  return static_cast<int64_t>(f);
}

void check_image(const RgbImage& image) {
  if (image.width < 1 || image.height < 1)
    fail(ErrorKind::kInvalidArgument, "the image is " + std::to_string(image.width) + " x " +
                                          std::to_string(image.height) + " pixels; both sides must be >= 1");
  if (image.pixels.size() != size_t(image.width) * size_t(image.height) * 3)
    fail(ErrorKind::kInvalidArgument, "RGB image of " + std::to_string(image.width) + " x " +
                                          std::to_string(image.height) + " pixels has " +
                                          std::to_string(image.pixels.size()) + " bytes");
}

inline uint8_t clamp_shift(int32_t acc, int precision) {
  // Arithmetic shift (floor), then the saturating packs of the AVX kernels / std::clamp of the scalar ones.
  return static_cast<uint8_t>(std::clamp(acc >> precision, 0, 255));
}

// Horizontal pass: [h][in_w][3] -> [h][out_w][3].
void resample_rows(const uint8_t* src, int h, int in_w, uint8_t* dst, const AxisFilter& f) {
  const int out_w = static_cast<int>(f.first.size());
  const int32_t half = int32_t(1) << (f.precision - 1);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src + size_t(y) * in_w * 3;
    uint8_t* out = dst + size_t(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const uint8_t* px = row + size_t(f.first[x]) * 3;
      const int16_t* w = &f.weights[size_t(x) * f.stride];
      int32_t r = half, g = half, b = half;
      for (int k = 0; k < f.count[x]; ++k, px += 3) {
        r += px[0] * w[k];
        g += px[1] * w[k];
        b += px[2] * w[k];
      }
      out[3 * x + 0] = clamp_shift(r, f.precision);
      out[3 * x + 1] = clamp_shift(g, f.precision);
      out[3 * x + 2] = clamp_shift(b, f.precision);
    }
  }
}

// Vertical pass: [in_h][w][3] -> [out_h][w][3].
void resample_columns(const uint8_t* src, int w, uint8_t* dst, const AxisFilter& f) {
  const int out_h = static_cast<int>(f.first.size());
  const size_t row_len = size_t(w) * 3;
  const int32_t half = int32_t(1) << (f.precision - 1);
  std::vector<int32_t> acc(row_len);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), half);
    const int16_t* wt = &f.weights[size_t(y) * f.stride];
    for (int k = 0; k < f.count[y]; ++k) {
      const uint8_t* row = src + size_t(f.first[y] + k) * row_len;
      const int32_t wk = wt[k];
      for (size_t j = 0; j < row_len; ++j) acc[j] += row[j] * wk;
    }
    uint8_t* out = dst + size_t(y) * row_len;
    for (size_t j = 0; j < row_len; ++j) out[j] = clamp_shift(acc[j], f.precision);
  }
}

}  // namespace

std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
  if (height < 1 || width < 1)
    fail(ErrorKind::kInvalidArgument, "the image is " + std::to_string(width) + " x " +
                                          std::to_string(height) + " pixels; both sides must be >= 1");
  if (factor < 1)
    fail(ErrorKind::kInvalidArgument, "resize factor must be >= 1, got " + std::to_string(factor));
  const int64_t h = height, w = width;
  const double ratio = double(std::max(h, w)) / double(std::min(h, w));
  if (ratio > 200)
    fail(ErrorKind::kInvalidArgument, "absolute aspect ratio must be smaller than 200, got " +
                                          std::to_string(ratio) + " (" + std::to_string(width) + " x " +
                                          std::to_string(height) + ")");
  int64_t h_bar = round_half_even(double(h) / factor) * factor;
  int64_t w_bar = round_half_even(double(w) / factor) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(double(h * w) / double(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(double(h) / beta / factor)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(double(w) / beta / factor)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / double(h * w));
    h_bar = static_cast<int64_t>(std::ceil(double(h) * beta / factor)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(double(w) * beta / factor)) * factor;
  }
  if (h_bar < 1 || w_bar < 1 || h_bar > (int64_t(1) << 30) || w_bar > (int64_t(1) << 30))
    fail(ErrorKind::kInvalidArgument, "the image (" + std::to_string(width) + " x " + std::to_string(height) +
                                          ") resizes to " + std::to_string(w_bar) + " x " +
                                          std::to_string(h_bar) + " pixels; check min_pixels / max_pixels");
  return {static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

// What torch computes for one axis of a uint8 antialiased bicubic resize (see the notes at
// resize_bicubic_antialias): double-precision PIL-style weights, normalised by their sum, then int16 fixed
// point with a precision chosen from the largest weight.
AxisFilter bicubic_antialias_filter(int in_size, int out_size) {
  M3_CHECK(in_size >= 1 && out_size >= 1, "bicubic_antialias_filter sizes");
  const double scale = double(in_size) / out_size;  // area_pixel_compute_scale, align_corners=False, no scale
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;  // (interp_size * 0.5) * scale, interp_size = 4
  const int taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;

  AxisFilter f;
  f.first.resize(out_size);
  f.count.resize(out_size);
  std::vector<double> wd(size_t(out_size) * taps, 0.0);
  double wt_max = 0.0;
  for (int i = 0; i < out_size; ++i) {
    const double center = opaque(scale * (i + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    xsize = std::clamp<int64_t>(xsize, 0, taps);
    double* w = &wd[size_t(i) * taps];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = keys_cubic((double(j + xmin) - center + 0.5) * invscale);
      total += w[j];
    }
    double row_max = 0.0;
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        row_max = std::max(row_max, w[j]);
      }
    }
    wt_max = std::max(wt_max, row_max);
    f.first[i] = static_cast<int>(xmin);
    f.count[i] = static_cast<int>(xsize);
  }

  // The first precision p at which round(max_w * 2^(p+1)) reaches 2^15, i.e. the largest at which twice the
  // largest weight still fits in int16 (at most 22).
  int precision = 0;
  for (; precision < 22; ++precision) {
    const int next = static_cast<int>(0.5 + wt_max * double(1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  f.precision = precision;
  f.stride = taps;
  f.weights.resize(wd.size());
  for (size_t k = 0; k < wd.size(); ++k) {
    const double v = wd[k] * double(1 << precision);
    f.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return f;
}

// torchvision.transforms.v2.functional.resize(uint8 CHW, [out_h, out_w], BICUBIC, antialias=True) on the CPU
// of the reference machine (torch 2.11 / torchvision 0.26, get_cpu_capability() == "AVX512"). Established
// from:
//  - torchvision/transforms/v2/functional/_geometry.py, resize_image(): an unchanged size returns the input
//    tensor itself (no filtering). _do_native_uint8_resize_on_cpu() is True for BICUBIC whatever the CPU
//    capability (only BILINEAR looks at "AVX2"/"AVX512"), so the uint8 tensor goes to
//    torch.nn.functional.interpolate(mode="bicubic", align_corners=False, antialias=True) as uint8: no float
//    round trip, no clamp_/round_. interpolate() is given a size, so the kernel's scales are nullopt.
//  - aten/src/ATen/native/DispatchStub.h / DispatchStub.cpp: REGISTER_DISPATCH registers nullptr for the
//    AVX512 build of a kernel (only ALSO_REGISTER_AVX512_DISPATCH keeps it) and choose_cpu_impl() then falls
//    back to the AVX2 build. _upsample_bicubic2d_aa_kernel uses REGISTER_DISPATCH (cpu/UpSampleKernel.cpp),
//    so an AVX512 machine runs the AVX2-compiled kernel (flags -O3 -mavx2 -mfma -mf16c, cmake/Codegen.cmake).
//  - cpu/UpSampleKernel.cpp, upsample_bicubic2d_aa_kernel_impl(): under CPU_CAPABILITY_AVX2, uint8 with
//    C <= 4 goes to upsample_avx_bilinear_bicubic_uint8<HelperInterpCubic>(antialias=true)
//    (cpu/UpSampleKernelAVXAntialias.h). The generic fallback (upsample_separable_Nd_kernel_impl with
//    basic_loop_separable_1d_*<uint8_t>) does the same integer arithmetic with the same weights.
//  - Weights, HelperInterpBase::_compute_index_ranges_int16_weights / _compute_index_ranges_weights /
//    _compute_indices_min_size_weights_aa, all in double: scale = in / out (UpSample.h
//    area_pixel_compute_scale -> compute_scales_value); support = 2 * scale if scale >= 1 else 2; taps =
//    ceil(support) * 2 + 1; for output i: center = scale * (i + 0.5), xmin = max(int64(center - support +
//    0.5), 0), xsize = clamp(min(int64(center + support + 0.5), in) - xmin, 0, taps), w_j = filter((j + xmin
//    - center
//    + 0.5) * invscale) with invscale = 1 / scale if scale >= 1 else 1, filter = HelperInterpCubic::aa_filter
//    with a = -0.5 (PIL's; -0.75 is only for antialias=False); w_j /= sum(w) when the sum is non-zero.
//    precision = first p in [0, 22) with int(0.5 + max_w * 2^(p+1)) >= 2^15 (22 if none); int16 weight =
//    int(w * 2^p +/- 0.5) (half away from zero).
//  - Passes: horizontal (W) first if out_w != in_w, then vertical (H) if out_h != in_h; a pass whose size is
//    unchanged is skipped (it would be the identity anyway: at scale 1 the taps sit at integer distances
//    -1, 0, 1, 2 where the filter is 0, 1, 0, 0). Each output = clamp((2^(p-1) + sum px * w) >> p, 0, 255)
//    in int32 (_mm256_madd_epi16 sums, srai, packs/packus saturation); the horizontal result is stored as
//    uint8 and is the vertical pass's input. Channels are independent (RGB is unpacked to RGBA with A = 0).
// Revisions read: cyyever/pytorch (a mirror of pytorch main after 2.11) UpSampleKernel.cpp @0b57c46e,
// UpSampleKernelAVXAntialias.h @4b33b207, DispatchStub.h @8940dcd8, DispatchStub.cpp @2b57df54,
// cmake/Codegen.cmake @05154f94; the weight code is unchanged from pytorch/pytorch UpSampleKernel.cpp
// @bb7240c3 (the 2.2-era file), so 2.11 carries the same arithmetic.
RgbImage resize_bicubic_antialias(const RgbImage& image, int out_height, int out_width) {
  check_image(image);
  if (out_height < 1 || out_width < 1)
    fail(ErrorKind::kInvalidArgument, "resize target " + std::to_string(out_width) + " x " +
                                          std::to_string(out_height) + " must be at least 1 x 1");
  if (out_height == image.height && out_width == image.width) return image;

  RgbImage cur_h;  // after the horizontal pass
  const RgbImage* src = &image;
  if (out_width != image.width) {
    const AxisFilter fx = bicubic_antialias_filter(image.width, out_width);
    cur_h.width = out_width;
    cur_h.height = image.height;
    cur_h.pixels.resize(size_t(out_width) * image.height * 3);
    resample_rows(image.pixels.data(), image.height, image.width, cur_h.pixels.data(), fx);
    src = &cur_h;
  }
  if (out_height == src->height) return cur_h;

  const AxisFilter fy = bicubic_antialias_filter(src->height, out_height);
  RgbImage out;
  out.width = src->width;
  out.height = out_height;
  out.pixels.resize(size_t(out.width) * out_height * 3);
  resample_columns(src->pixels.data(), src->width, out.pixels.data(), fy);
  return out;
}

namespace {

// `image` at the processor's size: itself where smart_resize keeps its size (torchvision hands back the same
// tensor then), else its antialiased bicubic resize, made in `storage`.
const RgbImage& at_vision_size(const RgbImage& image, const ImageProcessorConfig& config, RgbImage& storage) {
  check_image(image);
  const int p = config.patch_size, m = config.merge_size;
  if (p < 1 || m < 1) fail(ErrorKind::kInvalidArgument, "patch_size and merge_size must be >= 1");
  const auto [rh, rw] = smart_resize(image.height, image.width, p * m, config.min_pixels, config.max_pixels);
  if (rh == image.height && rw == image.width) return image;
  storage = resize_bicubic_antialias(image, rh, rw);
  return storage;
}

}  // namespace

RgbImage resize_for_vision(RgbImage image, const ImageProcessorConfig& config) {
  RgbImage resized;
  return &at_vision_size(image, config, resized) == &image ? std::move(image) : std::move(resized);
}

VisionPatches patchify_frames(std::span<const RgbImage> frames, const ImageProcessorConfig& config) {
  const int p = config.patch_size, m = config.merge_size, t = config.temporal_patch_size;
  if (p < 1 || m < 1 || t < 1)
    fail(ErrorKind::kInvalidArgument, "patch_size, merge_size and temporal_patch_size must be >= 1");
  if (frames.empty()) fail(ErrorKind::kInvalidArgument, "no frames to patch");
  const int width = frames[0].width, height = frames[0].height;
  for (const RgbImage& f : frames) {
    check_image(f);
    if (f.width != width || f.height != height)
      fail(ErrorKind::kInvalidArgument, "the frames of a video differ in size");
  }
  if (width % (p * m) != 0 || height % (p * m) != 0)
    fail(ErrorKind::kInvalidArgument, "frame sides must be multiples of " + std::to_string(p * m));

  // Rescale + normalise as rescale_and_normalize() does it: mean and std become float32 tensors multiplied by
  // 1 / rescale_factor (= 255.0, a float32 multiply), then tvF.normalize computes (float32(x) - mean) / std.
  // Pixels are bytes, so a 256-entry table per channel holds every value that can occur.
  float lut[3][256];
  for (int c = 0; c < 3; ++c) {
    const float mean = opaque(config.mean[c] * 255.0f);
    const float stdv = opaque(config.std[c] * 255.0f);
    if (!(stdv != 0.0f)) fail(ErrorKind::kInvalidArgument, "image std must be non-zero");
    for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) - mean) / stdv;
  }

  // The frames padded to a multiple of t by repeating the last one (a still image: t copies of itself),
  // viewed as [gt, t, C, gh/m, m, p, gw/m, m, p] and permuted to (gt, gh/m, gw/m, m, m, C, t, p, p): rows in
  // (gt, gh/m, gw/m, m, m) order, each row [C][t][p][p].
  const int nf = int(frames.size());
  const int gt = (nf + t - 1) / t, gh = height / p, gw = width / p;
  VisionPatches out;
  out.t = gt;
  out.h = gh;
  out.w = gw;
  const size_t row_len = size_t(3) * t * p * p;
  out.values.resize(size_t(gt) * gh * gw * row_len);
  const size_t stride = size_t(width) * 3;
  float* dst = out.values.data();
  for (int g = 0; g < gt; ++g) {
    for (int bh = 0; bh < gh / m; ++bh) {
      for (int bw = 0; bw < gw / m; ++bw) {
        for (int mh = 0; mh < m; ++mh) {
          for (int mw = 0; mw < m; ++mw) {
            const int y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
            for (int c = 0; c < 3; ++c) {
              for (int ti = 0; ti < t; ++ti) {
                const uint8_t* px = frames[size_t(std::min(g * t + ti, nf - 1))].pixels.data();
                for (int ph = 0; ph < p; ++ph) {
                  const uint8_t* src = px + size_t(y0 + ph) * stride + size_t(x0) * 3 + c;
                  for (int pw = 0; pw < p; ++pw) *dst++ = lut[c][src[3 * pw]];
                }
              }
            }
          }
        }
      }
    }
  }
  M3_CHECK(dst == out.values.data() + out.values.size(), "patch layout size");
  return out;
}

VisionPatches preprocess_image(const RgbImage& image, const ImageProcessorConfig& config) {
  RgbImage storage;
  return patchify_frames(std::span<const RgbImage>(&at_vision_size(image, config, storage), 1), config);
}

VisionPatches preprocess_video(std::span<const RgbImage> frames, const ImageProcessorConfig& config) {
  std::vector<RgbImage> resized;
  resized.reserve(frames.size());
  for (const RgbImage& f : frames) resized.push_back(resize_for_vision(f, config));
  return patchify_frames(resized, config);
}

}  // namespace m3::media
