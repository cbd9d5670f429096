// The CPU vision tower (model/vision_tower.h): the tiny fixture's vision path runs end to end, the 3D RoPE
// angles, a full forward against a naive double-precision implementation written here (image with h != w and
// a video split into two segments), segment independence, and the errors for bad grids and configs.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/model_config.h"
#include "loader/checkpoint.h"
#include "model/vision_tower.h"

namespace m3 {
namespace {
namespace fs = std::filesystem;

media::VisionPatches make_patches(int t, int h, int w, int patch_dim, uint32_t seed) {
  media::VisionPatches p;
  p.t = t;
  p.h = h;
  p.w = w;
  p.values.resize(static_cast<size_t>(int64_t(t) * h * w * patch_dim));
  for (size_t i = 0; i < p.values.size(); ++i)
    p.values[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed) * 1.7);
  return p;
}

template <typename F>
ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no m3::Error thrown";
  return ErrorKind::kInternal;
}

// ---------------------------------------------------------------------------------------------------------
// The tiny fixture checkpoint (bf16, transformers' names: block_sparse_moe.fc1 for the encoder MLP).

const char* kFixture = "tests/fixtures/models/m3-tiny-msa";

TEST(VisionTower, FixtureEncodesAnImage) {
  Checkpoint ckpt(kFixture);
  const ModelConfig config = load_model_config(kFixture);
  ASSERT_TRUE(config.has_vision);
  VisionTower tower(ckpt, config);
  EXPECT_EQ(tower.output_width(), 64);
  // A 28 x 56 image: grid 1 x 2 x 4 of 14-pixel patches, two 2 x 2 merge windows.
  const media::VisionPatches p = make_patches(1, 2, 4, config.vision.patch_dim(), 1);
  ASSERT_EQ(config.vision.patch_dim(), 1176);
  const std::vector<float> tower_out = tower.encode_tower(p);
  EXPECT_EQ(tower_out.size(), 8u * 16u);
  const std::vector<float> out = tower.encode(p);
  ASSERT_EQ(out.size(), 2u * 64u);
  bool any_nonzero = false;
  for (float v : out) {
    EXPECT_TRUE(std::isfinite(v));
    any_nonzero |= v != 0.0f;
  }
  EXPECT_TRUE(any_nonzero);
  EXPECT_EQ(tower.encode(p), out);  // deterministic, bit for bit
}

// ---------------------------------------------------------------------------------------------------------
// 3D RoPE.

TEST(VisionRope, AnglesOfThePosition) {
  const VisionConfig vc;  // the real model: head_dim 80, 26 dims per axis, 13 frequencies
  ASSERT_EQ(vc.rope_axis_dim(), 26);
  const std::vector<float> zero = vision_rope_angles(vc, 0, 0, 0);
  ASSERT_EQ(zero.size(), 39u);
  for (float a : zero) EXPECT_EQ(a, 0.0f);

  const std::vector<float> a = vision_rope_angles(vc, 1, 2, 3);
  for (int j = 0; j < 13; ++j) {
    const double w = std::pow(10000.0, -2.0 * j / 26.0);
    EXPECT_NEAR(a[j], 1 * w, 1e-6 * w) << j;
    EXPECT_NEAR(a[13 + j], 2 * w, 2e-6 * w) << j;
    EXPECT_NEAR(a[26 + j], 3 * w, 3e-6 * w) << j;
  }
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[13], 2.0f);
  EXPECT_EQ(a[26], 3.0f);
}

TEST(VisionRope, RotatesTheRightPairs) {
  const VisionConfig vc;
  const int d = vc.head_dim(), na = 39;
  std::vector<float> head(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) head[i] = 0.1f * static_cast<float>(i) - 2.0f;

  auto rotate = [&](int t, int row, int col) {
    const std::vector<float> a = vision_rope_angles(vc, t, row, col);
    std::vector<float> c(a.size()), s(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      c[i] = std::cos(a[i]);
      s[i] = std::sin(a[i]);
    }
    std::vector<float> x = head;
    apply_vision_rope(x.data(), c.data(), s.data(), na);
    return x;
  };
  EXPECT_EQ(rotate(0, 0, 0), head);  // position 0: identity

  // t = 1 only: pairs (i, i + 39) for i < 13 rotate by w_i; every other dim is untouched.
  const std::vector<float> x = rotate(1, 0, 0);
  for (int i = 0; i < d; ++i) {
    const bool rotated = i < 13 || (i >= 39 && i < 52);
    if (!rotated) {
      EXPECT_EQ(x[i], head[i]) << i;
    }
  }
  for (int i = 0; i < 13; ++i) {
    const double w = std::pow(10000.0, -2.0 * i / 26.0);
    const double x1 = head[i], x2 = head[i + 39];
    EXPECT_NEAR(x[i], x1 * std::cos(w) - x2 * std::sin(w), 1e-5) << i;
    EXPECT_NEAR(x[i + 39], x2 * std::cos(w) + x1 * std::sin(w), 1e-5) << i;
    EXPECT_NE(x[i], head[i]) << i;
  }
  // Dims 78 and 79 are never rotated.
  const std::vector<float> y = rotate(5, 7, 9);
  EXPECT_EQ(y[78], head[78]);
  EXPECT_EQ(y[79], head[79]);
}

// ---------------------------------------------------------------------------------------------------------
// A synthetic checkpoint written here, and a naive double-precision forward to compare with.

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using Weights = std::map<std::string, Tensor>;  // released (stored) names

// Minimal safetensors writer: 8-byte little-endian header length, JSON header, raw little-endian data.
void write_safetensors(const fs::path& path, const Weights& weights) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& [name, t] : weights) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    const uint64_t bytes = t.data.size() * 4;
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::ofstream out(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : weights)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
  ASSERT_TRUE(out.good()) << path;
}

struct Lcg {
  uint64_t s;
  double uniform() {  // [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) / static_cast<double>(1ull << 52) - 1.0;
  }
};

ModelConfig synthetic_config() {
  ModelConfig c;
  c.hidden_size = 12;  // text width
  c.has_vision = true;
  VisionConfig& v = c.vision;
  v.hidden_size = 32;
  v.num_heads = 2;  // head_dim 16: 3 x 4 rotated dims + 4 passed through
  v.num_layers = 2;
  v.intermediate_size = 48;
  v.num_channels = 3;
  v.temporal_patch_size = 2;
  v.patch_size = 2;  // patch_dim 24
  v.spatial_merge_size = 2;
  v.layer_norm_eps = 1e-5f;
  v.rope_theta = 100.0;
  v.segment_max_frames = 4;
  v.projector_hidden_size = 20;
  return c;
}

Weights synthetic_weights(const ModelConfig& c) {
  const VisionConfig& v = c.vision;
  const int64_t hv = v.hidden_size, in = v.intermediate_size, pr = v.projector_hidden_size, h = c.hidden_size;
  const int64_t mm = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  Lcg rng{12345};
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale, double center = 0.0) {
    Tensor t;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.shape = std::move(shape);
    for (int64_t i = 0; i < n; ++i) t.data.push_back(static_cast<float>(center + scale * rng.uniform()));
    w[name] = std::move(t);
  };
  auto linear = [&](const std::string& p, int64_t out, int64_t inw) {
    add(p + ".weight", {out, inw}, 1.7 / std::sqrt(static_cast<double>(inw)));
    add(p + ".bias", {out}, 0.2);
  };
  auto norm = [&](const std::string& p) {
    add(p + ".weight", {hv}, 0.3, 1.0);
    add(p + ".bias", {hv}, 0.2);
  };
  const std::string t = "vision_tower.vision_model.";
  add(t + "embeddings.patch_embedding.weight",
      {hv, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size},
      1.0 / std::sqrt(static_cast<double>(v.patch_dim())));
  norm(t + "pre_layrnorm");
  for (int l = 0; l < v.num_layers; ++l) {
    const std::string p = t + "encoder.layers." + std::to_string(l) + ".";
    norm(p + "layer_norm1");
    norm(p + "layer_norm2");
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"})
      linear(p + "self_attn." + proj, hv, hv);
    linear(p + "mlp.fc1", in, hv);
    linear(p + "mlp.fc2", hv, in);
  }
  linear("multi_modal_projector.linear_1", pr, hv);
  linear("multi_modal_projector.linear_2", h, pr);
  linear("patch_merge_mlp.linear_1", pr, h * mm);
  linear("patch_merge_mlp.linear_2", h, pr);
  return w;
}

fs::path write_checkpoint(const std::string& tag, const Weights& w) {
  const fs::path d = fs::temp_directory_path() / ("m3_vision_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  write_safetensors(d / "model.safetensors", w);
  return d;
}

// ---- the naive reference: doubles, plain loops, nothing shared with vision_tower.cc ----

using Mat = std::vector<std::vector<double>>;  // [rows][cols]

const std::vector<float>& W(const Weights& w, const std::string& name) {
  return w.at(name).data;
}

Mat ref_linear(const Mat& x, const std::vector<float>& weight, const std::vector<float>* bias, size_t out) {
  Mat y(x.size(), std::vector<double>(out, 0.0));
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t o = 0; o < out; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (size_t i = 0; i < x[r].size(); ++i)
        s += x[r][i] * static_cast<double>(weight[o * x[r].size() + i]);
      y[r][o] = s;
    }
  return y;
}

Mat ref_linear(const Weights& w, const std::string& p, const Mat& x) {
  const std::vector<float>& b = W(w, p + ".bias");
  return ref_linear(x, W(w, p + ".weight"), &b, b.size());
}

Mat ref_layer_norm(const Weights& w, const std::string& p, const Mat& x, double eps) {
  Mat y = x;
  for (size_t r = 0; r < x.size(); ++r) {
    const double n = static_cast<double>(x[r].size());
    double mean = 0, var = 0;
    for (double v : x[r]) mean += v / n;
    for (double v : x[r]) var += (v - mean) * (v - mean) / n;
    for (size_t i = 0; i < x[r].size(); ++i)
      y[r][i] = (x[r][i] - mean) / std::sqrt(var + eps) * W(w, p + ".weight")[i] + W(w, p + ".bias")[i];
  }
  return y;
}

Mat ref_gelu(Mat x) {
  for (auto& row : x)
    for (double& v : row) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  return x;
}

Mat ref_add(Mat a, const Mat& b) {
  for (size_t r = 0; r < a.size(); ++r)
    for (size_t i = 0; i < a[r].size(); ++i) a[r][i] += b[r][i];
  return a;
}

struct RefPos {
  int segment, t, row, col;
};

// Positions in the processor's patch order: t, h block, w block, row in block, column in block.
std::vector<RefPos> ref_positions(const VisionConfig& v, int t, int h, int w) {
  const int m = v.spatial_merge_size;
  std::vector<RefPos> pos;
  for (int tt = 0; tt < t; ++tt)
    for (int bh = 0; bh < h / m; ++bh)
      for (int bw = 0; bw < w / m; ++bw)
        for (int ih = 0; ih < m; ++ih)
          for (int iw = 0; iw < m; ++iw)
            pos.push_back({tt / v.segment_max_frames, tt % v.segment_max_frames, bh * m + ih, bw * m + iw});
  return pos;
}

// NeoX rotate-half over the first 3 * axis dims of one head: angles [t f | row f | col f], pair (i, i +
// half).
void ref_rope(double* x, const VisionConfig& v, const RefPos& p) {
  const int axis = 2 * ((v.head_dim() / 3) / 2), n = axis / 2, half = 3 * n;
  std::vector<double> angle;
  for (int coord : {p.t, p.row, p.col})
    for (int j = 0; j < n; ++j) angle.push_back(coord / std::pow(v.rope_theta, 2.0 * j / axis));
  for (int i = 0; i < half; ++i) {
    const double x1 = x[i], x2 = x[i + half];
    x[i] = x1 * std::cos(angle[i]) - x2 * std::sin(angle[i]);
    x[i + half] = x2 * std::cos(angle[i]) + x1 * std::sin(angle[i]);
  }
}

Mat ref_tower(const Weights& w, const ModelConfig& c, const media::VisionPatches& p) {
  const VisionConfig& v = c.vision;
  const size_t n = p.values.size() / v.patch_dim(), hv = v.hidden_size, d = v.head_dim();
  Mat x(n, std::vector<double>(v.patch_dim()));
  for (size_t r = 0; r < n; ++r)
    for (int i = 0; i < v.patch_dim(); ++i) x[r][i] = p.values[r * v.patch_dim() + i];
  const std::string t = "vision_tower.vision_model.";
  x = ref_linear(x, W(w, t + "embeddings.patch_embedding.weight"), nullptr, hv);
  x = ref_layer_norm(w, t + "pre_layrnorm", x, v.layer_norm_eps);
  const std::vector<RefPos> pos = ref_positions(v, p.t, p.h, p.w);
  for (int l = 0; l < v.num_layers; ++l) {
    const std::string pre = t + "encoder.layers." + std::to_string(l) + ".";
    const Mat h = ref_layer_norm(w, pre + "layer_norm1", x, v.layer_norm_eps);
    Mat q = ref_linear(w, pre + "self_attn.q_proj", h);
    Mat k = ref_linear(w, pre + "self_attn.k_proj", h);
    const Mat vv = ref_linear(w, pre + "self_attn.v_proj", h);
    for (size_t r = 0; r < n; ++r)
      for (int head = 0; head < v.num_heads; ++head) {
        ref_rope(&q[r][head * d], v, pos[r]);
        ref_rope(&k[r][head * d], v, pos[r]);
      }
    Mat attn(n, std::vector<double>(hv, 0.0));
    for (int head = 0; head < v.num_heads; ++head)
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> s(n, -INFINITY);
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j < n; ++j) {
          if (pos[j].segment != pos[i].segment) continue;
          double dot = 0;
          for (size_t e = 0; e < d; ++e) dot += q[i][head * d + e] * k[j][head * d + e];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        for (size_t j = 0; j < n; ++j) sum += std::exp(s[j] - mx);
        for (size_t j = 0; j < n; ++j)
          for (size_t e = 0; e < d; ++e)
            attn[i][head * d + e] += std::exp(s[j] - mx) / sum * vv[j][head * d + e];
      }
    x = ref_add(x, ref_linear(w, pre + "self_attn.out_proj", attn));
    const Mat h2 = ref_layer_norm(w, pre + "layer_norm2", x, v.layer_norm_eps);
    x = ref_add(x, ref_linear(w, pre + "mlp.fc2", ref_gelu(ref_linear(w, pre + "mlp.fc1", h2))));
  }
  return x;
}

Mat ref_encode(const Weights& w, const ModelConfig& c, const media::VisionPatches& p) {
  const Mat y = ref_linear(w, "multi_modal_projector.linear_2",
                           ref_gelu(ref_linear(w, "multi_modal_projector.linear_1", ref_tower(w, c, p))));
  const size_t mm = static_cast<size_t>(c.vision.spatial_merge_size * c.vision.spatial_merge_size);
  Mat merged(y.size() / mm);
  for (size_t g = 0; g < merged.size(); ++g)
    for (size_t k = 0; k < mm; ++k)
      merged[g].insert(merged[g].end(), y[g * mm + k].begin(), y[g * mm + k].end());
  return ref_linear(w, "patch_merge_mlp.linear_2",
                    ref_gelu(ref_linear(w, "patch_merge_mlp.linear_1", merged)));
}

void expect_close(const std::vector<float>& got, const Mat& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size() * want[0].size()) << what;
  double scale = 0;
  for (const auto& row : want)
    for (double v : row) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0.1) << what;
  double worst = 0;
  for (size_t r = 0; r < want.size(); ++r)
    for (size_t i = 0; i < want[r].size(); ++i) {
      const double g = got[r * want[r].size() + i], e = want[r][i];
      ASSERT_TRUE(std::isfinite(g)) << what;
      worst = std::max(worst, std::abs(g - e) / (std::abs(e) + 0.1 * scale));
    }
  EXPECT_LT(worst, 1e-4) << what;
}

class SyntheticTower : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config();
    weights_ = synthetic_weights(config_);
    dir_ = write_checkpoint("ok", weights_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ModelConfig config_;
  Weights weights_;
  fs::path dir_;
};

TEST_F(SyntheticTower, ImageMatchesNaiveReference) {
  Checkpoint ckpt(dir_.string());
  VisionTower tower(ckpt, config_);
  EXPECT_EQ(tower.output_width(), 12);
  const int pd = config_.vision.patch_dim();
  for (auto [h, w] : {std::pair{2, 6}, std::pair{4, 2}, std::pair{2, 2}}) {
    const media::VisionPatches p = make_patches(1, h, w, pd, 7);
    const std::string what = "image " + std::to_string(h) + "x" + std::to_string(w);
    expect_close(tower.encode_tower(p), ref_tower(weights_, config_, p), what + " tower");
    const std::vector<float> out = tower.encode(p);
    EXPECT_EQ(out.size(), size_t(h * w / 4 * 12));
    expect_close(out, ref_encode(weights_, config_, p), what);
  }
}

TEST_F(SyntheticTower, VideoSegmentsMatchNaiveReference) {
  Checkpoint ckpt(dir_.string());
  VisionTower tower(ckpt, config_);
  const int pd = config_.vision.patch_dim();
  // t = 6 with segment_max_frames 4: segments of 4 and 2 temporal patches, the t index restarting at 0.
  const media::VisionPatches video = make_patches(6, 4, 2, pd, 3);
  const std::vector<float> x = tower.encode_tower(video);
  expect_close(x, ref_tower(weights_, config_, video), "video tower");
  expect_close(tower.encode(video), ref_encode(weights_, config_, video), "video");

  // Each segment is an independent sequence: encoding its temporal patches alone gives the same rows,
  // exactly.
  const size_t per_t = size_t(4 * 2) * size_t(pd), hv = 32;
  media::VisionPatches first = video, second = video;
  first.t = 4;
  first.values.assign(video.values.begin(), video.values.begin() + 4 * per_t);
  second.t = 2;
  second.values.assign(video.values.begin() + 4 * per_t, video.values.end());
  const std::vector<float> x1 = tower.encode_tower(first), x2 = tower.encode_tower(second);
  ASSERT_EQ(x1.size() + x2.size(), x.size());
  EXPECT_TRUE(std::equal(x1.begin(), x1.end(), x.begin()));
  EXPECT_TRUE(std::equal(x2.begin(), x2.end(), x.begin() + static_cast<int64_t>(x1.size())));
  // ... and attention does cross temporal patches inside a segment: a lone temporal patch differs.
  media::VisionPatches lone = video;
  lone.t = 1;
  lone.values.assign(video.values.begin(), video.values.begin() + per_t);
  const std::vector<float> x0 = tower.encode_tower(lone);
  EXPECT_FALSE(std::equal(x0.begin(), x0.end(), x.begin()));
  EXPECT_EQ(x0.size(), 8 * hv);
}

TEST_F(SyntheticTower, BadGridsAreInvalidArguments) {
  Checkpoint ckpt(dir_.string());
  VisionTower tower(ckpt, config_);
  const int pd = config_.vision.patch_dim();
  auto kind = [&](media::VisionPatches p) { return error_kind_of([&] { tower.encode(p); }); };
  EXPECT_EQ(kind(make_patches(1, 3, 2, pd, 0)), ErrorKind::kInvalidArgument);  // h not a multiple of 2
  EXPECT_EQ(kind(make_patches(1, 2, 5, pd, 0)), ErrorKind::kInvalidArgument);  // w not a multiple of 2
  EXPECT_EQ(kind(make_patches(0, 2, 2, pd, 0)), ErrorKind::kInvalidArgument);  // no temporal patch
  EXPECT_EQ(kind(make_patches(1, 0, 2, pd, 0)), ErrorKind::kInvalidArgument);
  media::VisionPatches wrong = make_patches(1, 2, 2, pd, 0);
  wrong.values.pop_back();
  EXPECT_EQ(kind(wrong), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind(make_patches(1, 2, 2, pd + 1, 0)), ErrorKind::kInvalidArgument);  // patch width
  EXPECT_EQ(error_kind_of([&] { tower.encode_tower(make_patches(1, 1, 2, pd, 0)); }),
            ErrorKind::kInvalidArgument);
}

TEST_F(SyntheticTower, ConfigWithoutVisionIsInvalid) {
  Checkpoint ckpt(dir_.string());
  ModelConfig text_only = config_;
  text_only.has_vision = false;
  EXPECT_EQ(error_kind_of([&] { VisionTower t(ckpt, text_only); }), ErrorKind::kInvalidArgument);
}

TEST(VisionTowerErrors, MissingOrMisshapenTensorsAreNamed) {
  const ModelConfig c = synthetic_config();
  Weights w = synthetic_weights(c);
  w.erase("vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias");
  const fs::path dir = write_checkpoint("missing", w);
  {
    Checkpoint ckpt(dir.string());
    try {
      VisionTower t(ckpt, c);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
      EXPECT_NE(std::string(e.what()).find("vision.tower.encoder.layers.1.mlp.fc2.bias"), std::string::npos)
          << e.what();
    }
    ModelConfig wide = c;
    wide.vision.intermediate_size = 64;  // fc1 is stored [48, 32]
    EXPECT_EQ(error_kind_of([&] { VisionTower t(ckpt, wide); }), ErrorKind::kCorruptData);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace m3
