// The CPU reference of the MiniMax-M3 vision path (spec/model.md section 4): patch embedding, pre-LayerNorm,
// CLIP-style encoder layers with 3D RoPE and per-segment bidirectional attention, then the projector and the
// 2 x 2 patch merger. fp32 activations; every output row is computed in a fixed order, independent of the
// number of OpenMP threads.
#include "model/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "model/cpu_ops.h"

namespace m3 {

namespace {

// Exact (erf) GELU, as torch's nn.GELU() / F.gelu(approximate="none").
inline float gelu(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752440f));
}

void gelu_inplace(std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) x[i] = gelu(x[i]);
}

std::string grid_string(const media::VisionPatches& p) {
  return "grid (t=" + std::to_string(p.t) + ", h=" + std::to_string(p.h) + ", w=" + std::to_string(p.w) + ")";
}

}  // namespace

std::vector<float> vision_rope_angles(const VisionConfig& vc, int t, int row, int col) {
  const int a = vc.rope_axis_dim(), n = a / 2;
  std::vector<float> angles(static_cast<size_t>(3 * n));
  const float theta = static_cast<float>(vc.rope_theta);
  const int pos[3] = {t, row, col};
  for (int j = 0; j < n; ++j) {
    // torch: 1.0 / (theta ** (torch.arange(0, a, 2, dtype=torch.float32) / a)), all in float32.
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(a);
    const float inv_freq = 1.0f / std::pow(theta, exponent);
    for (int axis = 0; axis < 3; ++axis) angles[axis * n + j] = static_cast<float>(pos[axis]) * inv_freq;
  }
  return angles;
}

void apply_vision_rope(float* head, const float* cos, const float* sin, int num_angles) {
  for (int i = 0; i < num_angles; ++i) {
    const float x1 = head[i], x2 = head[i + num_angles];
    head[i] = x1 * cos[i] - x2 * sin[i];
    head[i + num_angles] = x2 * cos[i] + x1 * sin[i];
  }
}

namespace {

void read_linear(const Checkpoint& ckpt, const std::string& prefix, int out, int in, std::vector<float>& w,
                 std::vector<float>& b) {
  w = ckpt.read_f32(prefix + ".weight", {out, in});
  b = ckpt.read_f32(prefix + ".bias", {out});
}

}  // namespace

std::vector<VisionTensor> released_vision_tensors(const ModelConfig& c) {
  const VisionConfig& v = c.vision;
  const int64_t hv = v.hidden_size, inter = v.intermediate_size, pr = v.projector_hidden_size,
                h = c.hidden_size;
  const int64_t m2 = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  std::vector<VisionTensor> out = {{"vision_tower.vision_model.embeddings.patch_embedding.weight",
                                    {hv, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size}},
                                   {"vision_tower.vision_model.pre_layrnorm.weight", {hv}},
                                   {"vision_tower.vision_model.pre_layrnorm.bias", {hv}}};
  for (int l = 0; l < v.num_layers; ++l) {
    const std::string p = "vision_tower.vision_model.encoder.layers." + std::to_string(l) + ".";
    for (const char* n : {"layer_norm1", "layer_norm2"}) {
      out.push_back({p + n + ".weight", {hv}});
      out.push_back({p + n + ".bias", {hv}});
    }
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      out.push_back({p + "self_attn." + n + ".weight", {hv, hv}});
      out.push_back({p + "self_attn." + n + ".bias", {hv}});
    }
    out.push_back({p + "mlp.fc1.weight", {inter, hv}});
    out.push_back({p + "mlp.fc1.bias", {inter}});
    out.push_back({p + "mlp.fc2.weight", {hv, inter}});
    out.push_back({p + "mlp.fc2.bias", {hv}});
  }
  for (const char* n : {"multi_modal_projector", "patch_merge_mlp"}) {
    const int64_t in = std::string(n) == "patch_merge_mlp" ? h * m2 : hv;
    out.push_back({std::string(n) + ".linear_1.weight", {pr, in}});
    out.push_back({std::string(n) + ".linear_1.bias", {pr}});
    out.push_back({std::string(n) + ".linear_2.weight", {h, pr}});
    out.push_back({std::string(n) + ".linear_2.bias", {h}});
  }
  return out;
}

VisionTower::VisionTower(const Checkpoint& ckpt, const ModelConfig& config)
    : vc_(config.vision), text_hidden_(config.hidden_size) {
  if (!config.has_vision)
    fail(ErrorKind::kInvalidArgument,
         "the model has no vision_config in config.json, so it cannot take image or video input");
  const int hv = vc_.hidden_size, inter = vc_.intermediate_size, pr = vc_.projector_hidden_size;
  const int m = vc_.spatial_merge_size;
  if (hv <= 0 || vc_.num_heads <= 0 || hv % vc_.num_heads != 0 || vc_.rope_axis_dim() < 2 || inter <= 0 ||
      pr <= 0 || m <= 0 || text_hidden_ <= 0 || vc_.patch_dim() <= 0 || vc_.segment_max_frames <= 0)
    fail(ErrorKind::kInvalidArgument, "vision_config: inconsistent sizes (hidden " + std::to_string(hv) +
                                          ", heads " + std::to_string(vc_.num_heads) + ")");

  auto linear = [&](const std::string& prefix, int out, int in) {
    Linear l;
    read_linear(ckpt, prefix, out, in, l.w, l.b);
    l.in = in;
    l.out = out;
    return l;
  };
  auto norm = [&](const std::string& prefix) {
    LayerNorm n;
    n.w = ckpt.read_f32(prefix + ".weight", {hv});
    n.b = ckpt.read_f32(prefix + ".bias", {hv});
    return n;
  };

  // The Conv3d kernel [Hv, C, T, p, p] is a [Hv][C * T * p * p] matrix in the row layout of VisionPatches.
  patch_embed_ =
      ckpt.read_f32("vision.tower.embeddings.patch_embedding.weight",
                    {hv, vc_.num_channels, vc_.temporal_patch_size, vc_.patch_size, vc_.patch_size});
  pre_norm_ = norm("vision.tower.pre_layrnorm");
  layers_.resize(static_cast<size_t>(vc_.num_layers));
  for (int l = 0; l < vc_.num_layers; ++l) {
    const std::string p = "vision.tower.encoder.layers." + std::to_string(l) + ".";
    Layer& layer = layers_[static_cast<size_t>(l)];
    layer.ln1 = norm(p + "layer_norm1");
    layer.ln2 = norm(p + "layer_norm2");
    layer.q = linear(p + "self_attn.q_proj", hv, hv);
    layer.k = linear(p + "self_attn.k_proj", hv, hv);
    layer.v = linear(p + "self_attn.v_proj", hv, hv);
    layer.o = linear(p + "self_attn.out_proj", hv, hv);
    layer.fc1 = linear(p + "mlp.fc1", inter, hv);
    layer.fc2 = linear(p + "mlp.fc2", hv, inter);
  }
  proj1_ = linear("vision.projector.linear_1", pr, hv);
  proj2_ = linear("vision.projector.linear_2", text_hidden_, pr);
  merge1_ = linear("vision.merge.linear_1", pr, text_hidden_ * m * m);
  merge2_ = linear("vision.merge.linear_2", text_hidden_, pr);
}

namespace {

// y[rows][out] = x[rows][in] . W^T + b
template <typename L>
std::vector<float> apply_linear(const L& l, const std::vector<float>& x, int64_t rows) {
  std::vector<float> y(static_cast<size_t>(rows * l.out));
  cpu::matmul(x.data(), rows, l.in, l.w.data(), l.out, y.data());
  const int64_t out = l.out;
#pragma omp parallel for schedule(static) if (rows * out > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) y[r * out + j] += l.b[j];
  return y;
}

// Standard LayerNorm over rows of `dim` (mean, biased variance; the statistics accumulated in double).
template <typename N>
void layer_norm(const N& norm, const float* x, float* y, int64_t rows, int dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0;
    for (int i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const float meanf = static_cast<float>(mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + static_cast<double>(eps)));
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] - meanf) * inv * norm.w[i] + norm.b[i];
  }
}

}  // namespace

VisionGrid vision_grid(const VisionConfig& vc_, const media::VisionPatches& p) {
  const int m = vc_.spatial_merge_size;
  if (p.t < 1 || p.h < 1 || p.w < 1)
    fail(ErrorKind::kInvalidArgument,
         "vision input " + grid_string(p) + ": every grid dimension must be >= 1");
  if (p.h % m != 0 || p.w % m != 0)
    fail(ErrorKind::kInvalidArgument, "vision input " + grid_string(p) + ": h and w must be multiples of " +
                                          "spatial_merge_size " + std::to_string(m));
  const int64_t n = p.num_patches(), pd = vc_.patch_dim();
  if (static_cast<int64_t>(p.values.size()) != n * pd)
    fail(ErrorKind::kInvalidArgument, "vision input " + grid_string(p) + ": " +
                                          std::to_string(p.values.size()) +
                                          " values, expected t*h*w*patch_dim = " + std::to_string(n) + "*" +
                                          std::to_string(pd) + " = " + std::to_string(n * pd));
  VisionGrid g;
  g.n = n;
  const int64_t hw = int64_t(p.h) * p.w;
  const int smax = vc_.segment_max_frames;
  for (int t0 = 0; t0 < p.t; t0 += smax) g.seg.push_back(t0 * hw);
  g.seg.push_back(n);

  // Per-patch angles, in the processor's order: (t, h block, w block, row in block, column in block).
  const int na = 3 * (vc_.rope_axis_dim() / 2);
  g.num_angles = na;
  g.cos.resize(static_cast<size_t>(n * na));
  g.sin.resize(static_cast<size_t>(n * na));
  const int wb = p.w / m;
#pragma omp parallel for schedule(static) if (n > 256)
  for (int64_t r = 0; r < n; ++r) {
    const int tt = static_cast<int>(r / hw), within = static_cast<int>(r % hw);
    const int iw = within % m, ih = (within / m) % m, blk = within / (m * m);
    const int row = (blk / wb) * m + ih, col = (blk % wb) * m + iw;
    const std::vector<float> a = vision_rope_angles(vc_, tt % smax, row, col);
    for (int i = 0; i < na; ++i) {
      g.cos[r * na + i] = std::cos(a[i]);
      g.sin[r * na + i] = std::sin(a[i]);
    }
  }
  return g;
}

// Bidirectional multi-head attention inside each segment; q and k are rotated in place first.
void VisionTower::attention(const VisionGrid& g, std::vector<float>& q, std::vector<float>& k,
                            const std::vector<float>& v, std::vector<float>& out) const {
  const int hv = vc_.hidden_size, heads = vc_.num_heads, d = vc_.head_dim(), na = g.num_angles;
  const int64_t n = g.n;
#pragma omp parallel for schedule(static) if (n > 64)
  for (int64_t r = 0; r < n; ++r)
    for (int h = 0; h < heads; ++h) {
      apply_vision_rope(&q[r * hv + h * d], &g.cos[r * na], &g.sin[r * na], na);
      apply_vision_rope(&k[r * hv + h * d], &g.cos[r * na], &g.sin[r * na], na);
    }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> kh, vh;  // one segment's keys and values, head-major [heads][L][d]
  for (size_t s = 0; s + 1 < g.seg.size(); ++s) {
    const int64_t r0 = g.seg[s], len = g.seg[s + 1] - r0;
    kh.resize(static_cast<size_t>(heads * len * d));
    vh.resize(kh.size());
#pragma omp parallel for schedule(static) if (len > 64)
    for (int64_t j = 0; j < len; ++j)
      for (int h = 0; h < heads; ++h)
        for (int e = 0; e < d; ++e) {
          kh[(h * len + j) * d + e] = k[(r0 + j) * hv + h * d + e];
          vh[(h * len + j) * d + e] = v[(r0 + j) * hv + h * d + e];
        }
#pragma omp parallel if (len > 16)
    {
      std::vector<float> p(static_cast<size_t>(len)), acc(static_cast<size_t>(d));
#pragma omp for collapse(2) schedule(static)
      for (int h = 0; h < heads; ++h)
        for (int64_t i = 0; i < len; ++i) {
          const float* qi = &q[(r0 + i) * hv + h * d];
          const float* kb = &kh[h * len * d];
          const float* vb = &vh[h * len * d];
          float mx = -INFINITY;
          for (int64_t j = 0; j < len; ++j) {
            p[j] = cpu::dot(qi, kb + j * d, d) * scale;
            mx = std::max(mx, p[j]);
          }
          float sum = 0;
          for (int64_t j = 0; j < len; ++j) {
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = 0; j < len; ++j) {
            const float pj = p[j];
            const float* vj = vb + j * d;
            for (int e = 0; e < d; ++e) acc[e] += pj * vj[e];
          }
          const float inv = 1.0f / sum;
          float* o = &out[(r0 + i) * hv + h * d];
          for (int e = 0; e < d; ++e) o[e] = acc[e] * inv;
        }
    }
  }
}

void VisionTower::encoder_layer(const Layer& layer, const VisionGrid& g, std::vector<float>& x) const {
  const int hv = vc_.hidden_size;
  const int64_t n = g.n;
  std::vector<float> h(x.size());
  layer_norm(layer.ln1, x.data(), h.data(), n, hv, vc_.layer_norm_eps);
  std::vector<float> q = apply_linear(layer.q, h, n);
  std::vector<float> k = apply_linear(layer.k, h, n);
  const std::vector<float> v = apply_linear(layer.v, h, n);
  attention(g, q, k, v, h);  // h <- attention output
  q.clear();
  q.shrink_to_fit();
  k.clear();
  k.shrink_to_fit();
  const std::vector<float> o = apply_linear(layer.o, h, n);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  layer_norm(layer.ln2, x.data(), h.data(), n, hv, vc_.layer_norm_eps);
  std::vector<float> f = apply_linear(layer.fc1, h, n);
  gelu_inplace(f);
  const std::vector<float> f2 = apply_linear(layer.fc2, f, n);
  for (size_t i = 0; i < x.size(); ++i) x[i] += f2[i];
}

std::vector<float> VisionTower::encode_tower(const media::VisionPatches& patches) const {
  const VisionGrid g = vision_grid(vc_, patches);
  const int hv = vc_.hidden_size;
  std::vector<float> x(static_cast<size_t>(g.n * hv));
  cpu::matmul(patches.values.data(), g.n, vc_.patch_dim(), patch_embed_.data(), hv, x.data());
  layer_norm(pre_norm_, x.data(), x.data(), g.n, hv, vc_.layer_norm_eps);
  for (const Layer& layer : layers_) encoder_layer(layer, g, x);
  return x;
}

std::vector<float> VisionTower::encode(const media::VisionPatches& patches) const {
  const std::vector<float> x = encode_tower(patches);
  const int64_t n = patches.num_patches(), mm = int64_t(vc_.spatial_merge_size) * vc_.spatial_merge_size;
  std::vector<float> y = apply_linear(proj1_, x, n);
  gelu_inplace(y);
  // [n][H] is also [n / m^2][H * m^2]: each merge window's m^2 projected patches are consecutive rows.
  std::vector<float> z = apply_linear(proj2_, y, n);
  std::vector<float> u = apply_linear(merge1_, z, n / mm);
  gelu_inplace(u);
  return apply_linear(merge2_, u, n / mm);
}

}  // namespace m3
