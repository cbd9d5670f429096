// The CUDA vision tower: weights from the checkpoint as bf16, then per image or video the patch embedding,
// the encoder layers, the projector and the merger (see cuda_vision.h).
#include "model/cuda_vision.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "common/error.h"
#include "kernels/kernels.h"
#include "kernels/vision.h"

namespace m3 {
namespace {

using bf16 = __nv_bfloat16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    fail(ErrorKind::kInternal, std::string("vision tower: ") + what + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    fail(ErrorKind::kInternal, std::string("vision tower: ") + what + ": cuBLAS status " + std::to_string(e));
}

}  // namespace

struct CudaVisionTower::Impl {
  struct Linear {
    bf16* w = nullptr;  // [out][in]
    float* b = nullptr;
    int in = 0, out = 0;
  };
  struct Norm {
    float *w = nullptr, *b = nullptr;
  };
  struct Layer {
    Norm ln1, ln2;
    Linear qkv, o, fc1, fc2;  // qkv: q, k and v stacked ([3 hidden][hidden]), one GEMM
  };
  VisionConfig vc;
  int text_hidden = 0, device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> owned;
  Linear patch, proj1, proj2, merge1, merge2;
  Norm pre;
  std::vector<Layer> layers;
  std::map<std::string, std::pair<void*, size_t>> scratch;  // name -> (buffer, bytes), grown on demand

  template <typename T>
  T* upload(const std::vector<float>& v) {
    void* p = nullptr;
    check(cudaMalloc(&p, v.size() * sizeof(T)), "cudaMalloc");
    owned.push_back(p);
    std::vector<T> host(v.size());
    for (size_t i = 0; i < v.size(); ++i) host[i] = T(v[i]);
    check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return static_cast<T*>(p);
  }
  // The linears `names` (each [out][in] + bias) stacked into one [names x out][in].
  Linear linear(const Checkpoint& c, const std::vector<std::string>& names, int out, int in) {
    std::vector<float> w, b;
    for (const std::string& name : names) {
      const std::vector<float> wi = c.read_f32(name + ".weight", {out, in}),
                               bi = c.read_f32(name + ".bias", {out});
      w.insert(w.end(), wi.begin(), wi.end());
      b.insert(b.end(), bi.begin(), bi.end());
    }
    return {upload<bf16>(w), upload<float>(b), in, out * int(names.size())};
  }
  Linear linear(const Checkpoint& c, const std::string& name, int out, int in) {
    return linear(c, std::vector<std::string>{name}, out, in);
  }
  Norm norm(const Checkpoint& c, const std::string& name) {
    return {upload<float>(c.read_f32(name + ".weight", {vc.hidden_size})),
            upload<float>(c.read_f32(name + ".bias", {vc.hidden_size}))};
  }
  template <typename T>
  T* buf(const std::string& name, size_t count) {
    auto& [p, bytes] = scratch[name];
    if (bytes < count * sizeof(T)) {
      if (p) check(cudaFree(p), "cudaFree");
      check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc (vision scratch)");
      bytes = count * sizeof(T);
    }
    return static_cast<T*>(p);
  }
  // C[T][N] (fp32) = A[T][K] . W[N][K]^T, then + bias (and GELU into act when given).
  void gemm(const bf16* A, int64_t T, const Linear& L, float* C) {
    const float one = 1.0f, zero = 0.0f;
    check(
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, L.out, int(T), L.in, &one, L.w, CUDA_R_16BF, L.in, A,
                     CUDA_R_16BF, L.in, &zero, C, CUDA_R_32F, L.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }
  void attention(const bf16* q, const bf16* k, const bf16* v, int ldv, int64_t r0, int64_t len, float* out);
};

CudaVisionTower::CudaVisionTower(const Checkpoint& ckpt, const ModelConfig& config, int device,
                                 int reserve_patches)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (!config.has_vision)
    fail(ErrorKind::kInvalidArgument,
         "the model has no vision_config in config.json, so it cannot take images");
  m.vc = config.vision;
  m.text_hidden = config.hidden_size;
  m.device = device;
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cublasCreate(&m.blas), "cublasCreate");
  check(cublasSetStream(m.blas, m.stream), "cublasSetStream");
  const VisionConfig& v = m.vc;
  const int hv = v.hidden_size, pr = v.projector_hidden_size, h = config.hidden_size;
  const int m2 = v.spatial_merge_size * v.spatial_merge_size;
  m.patch = {
      m.upload<bf16>(ckpt.read_f32("vision.tower.embeddings.patch_embedding.weight",
                                   {hv, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size})),
      nullptr, v.patch_dim(), hv};
  m.pre = m.norm(ckpt, "vision.tower.pre_layrnorm");
  for (int l = 0; l < v.num_layers; ++l) {
    const std::string p = "vision.tower.encoder.layers." + std::to_string(l) + ".";
    Impl::Layer L;
    L.ln1 = m.norm(ckpt, p + "layer_norm1");
    L.ln2 = m.norm(ckpt, p + "layer_norm2");
    L.qkv = m.linear(ckpt, {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}, hv, hv);
    L.o = m.linear(ckpt, p + "self_attn.out_proj", hv, hv);
    L.fc1 = m.linear(ckpt, p + "mlp.fc1", v.intermediate_size, hv);
    L.fc2 = m.linear(ckpt, p + "mlp.fc2", hv, v.intermediate_size);
    m.layers.push_back(L);
  }
  m.proj1 = m.linear(ckpt, "vision.projector.linear_1", pr, hv);
  m.proj2 = m.linear(ckpt, "vision.projector.linear_2", h, pr);
  m.merge1 = m.linear(ckpt, "vision.merge.linear_1", pr, h * m2);
  m.merge2 = m.linear(ckpt, "vision.merge.linear_2", h, pr);
  const int side = int(std::sqrt(double(reserve_patches))) / v.spatial_merge_size * v.spatial_merge_size;
  if (side > 0) {  // the largest square grid within reserve_patches: every scratch buffer at its full size
    media::VisionPatches blank;
    blank.t = 1, blank.h = side, blank.w = side;
    blank.values.assign(size_t(side) * side * v.patch_dim(), 0.0f);
    encode(blank);
  }
}

CudaVisionTower::~CudaVisionTower() {
  if (!impl_) return;
  cudaSetDevice(impl_->device);
  for (void* p : impl_->owned) cudaFree(p);
  for (auto& [name, b] : impl_->scratch) cudaFree(b.first);
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

// Rows [r0, r0 + len) attend to each other: per head S = scale Q K^T, P = softmax(S), O = P V, with the heads
// as the batch of strided GEMMs over the [rows][heads * head_dim] layouts (column-major views, see the
// calls); q, k and out have rows of `hidden`, v rows of ldv.
void CudaVisionTower::Impl::attention(const bf16* q, const bf16* k, const bf16* v, int ldv, int64_t r0,
                                      int64_t len, float* out) {
  const int heads = vc.num_heads, d = vc.head_dim(), hv = vc.hidden_size;
  // Heads per pass, so that the scores stay within ~512 MB.
  const int64_t per_head = len * len * (sizeof(float) + sizeof(bf16));
  const int chunk = int(std::max<int64_t>(1, std::min<int64_t>(heads, (int64_t(512) << 20) / per_head)));
  float* S = buf<float>("scores", size_t(chunk) * len * len);
  bf16* P = buf<bf16>("probs", size_t(chunk) * len * len);
  const float scale = 1.0f / std::sqrt(float(d)), one = 1.0f, zero = 0.0f;
  for (int h0 = 0; h0 < heads; h0 += chunk) {
    const int nh = std::min(chunk, heads - h0);
    const int64_t at = r0 * hv + int64_t(h0) * d;
    // S^T (column-major len x len) = K Q^T: A = K as d x len (lda hv), transposed; B = Q as d x len.
    check(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(len), int(len), d, &scale, k + at,
                                     CUDA_R_16BF, hv, d, q + at, CUDA_R_16BF, hv, d, &zero, S, CUDA_R_32F,
                                     int(len), len * len, nh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "scores");
    cuda::softmax_rows(S, int64_t(nh) * len, int(len), P, stream);
    // O^T (d x len, ldc hv) = V^T P^T: A = V as d x len (lda ldv), B = P^T as len x len (ldb len).
    check(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, d, int(len), int(len), &one,
                                     v + r0 * ldv + int64_t(h0) * d, CUDA_R_16BF, ldv, d, P, CUDA_R_16BF,
                                     int(len), len * len, &zero, out + at, CUDA_R_32F, hv, d, nh,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "values");
  }
}

std::vector<float> CudaVisionTower::encode(const media::VisionPatches& patches) const {
  std::lock_guard<std::mutex> lock(mu_);
  Impl& m = *impl_;
  const VisionConfig& v = m.vc;
  const VisionGrid g = vision_grid(v, patches);  // validates the grid; segments and RoPE tables
  check(cudaSetDevice(m.device), "cudaSetDevice");
  cudaStream_t s = m.stream;
  const int64_t n = g.n;
  const int hv = v.hidden_size, heads = v.num_heads, d = v.head_dim(), inter = v.intermediate_size;
  const int m2 = v.spatial_merge_size * v.spatial_merge_size, h = m.text_hidden, pr = v.projector_hidden_size;
  // The widest row of any activation (the merger reads the projector's n x h output as n / m2 rows of h *
  // m2).
  const int64_t widest = std::max<int64_t>({int64_t(v.patch_dim()), hv, inter, pr, h});

  float* in32 = m.buf<float>("in32", size_t(n) * v.patch_dim());
  float* cosb = m.buf<float>("cos", size_t(n) * g.num_angles);
  float* sinb = m.buf<float>("sin", size_t(n) * g.num_angles);
  check(cudaMemcpyAsync(in32, patches.values.data(), patches.values.size() * 4, cudaMemcpyHostToDevice, s),
        "h2d");
  check(cudaMemcpyAsync(cosb, g.cos.data(), g.cos.size() * 4, cudaMemcpyHostToDevice, s), "h2d");
  check(cudaMemcpyAsync(sinb, g.sin.data(), g.sin.size() * 4, cudaMemcpyHostToDevice, s), "h2d");
  bf16* a = m.buf<bf16>("a", size_t(n) * widest);  // the next GEMM's bf16 input
  float* x = m.buf<float>("x", size_t(n) * hv);    // the residual stream
  float* y = m.buf<float>("y", size_t(n) * widest);
  float* qkv = m.buf<float>("qkv", size_t(n) * 3 * hv);  // [n][q | k | v]
  bf16* qkvb = m.buf<bf16>("qkvb", size_t(n) * 3 * hv);  // its bf16 copy: v is read from here
  bf16 *qb = m.buf<bf16>("qb", size_t(n) * hv), *kb = m.buf<bf16>("kb", size_t(n) * hv);

  cuda::to_bf16(in32, n * v.patch_dim(), a, s);
  m.gemm(a, n, m.patch, x);
  cuda::layer_norm_bias(x, m.pre.w, m.pre.b, int(n), hv, v.layer_norm_eps, a, x, s);
  for (const Impl::Layer& L : m.layers) {
    cuda::layer_norm_bias(x, L.ln1.w, L.ln1.b, int(n), hv, v.layer_norm_eps, a, nullptr, s);
    m.gemm(a, n, L.qkv, qkv);
    cuda::bias_act(qkv, L.qkv.b, n, 3 * hv, false, qkv, qkvb, s);
    cuda::vision_rope(qkv, qkv + hv, 3 * hv, cosb, sinb, int(n), heads, d, g.num_angles, qb, kb, s);
    for (size_t seg = 0; seg + 1 < g.seg.size(); ++seg)
      m.attention(qb, kb, qkvb + 2 * hv, 3 * hv, g.seg[seg], g.seg[seg + 1] - g.seg[seg], y);
    cuda::to_bf16(y, n * hv, a, s);
    m.gemm(a, n, L.o, y);
    cuda::bias_act(y, L.o.b, n, hv, false, y, nullptr, s);
    cuda::add_inplace(x, y, n * hv, s);
    cuda::layer_norm_bias(x, L.ln2.w, L.ln2.b, int(n), hv, v.layer_norm_eps, a, nullptr, s);
    m.gemm(a, n, L.fc1, y);
    cuda::bias_act(y, L.fc1.b, n, inter, true, nullptr, a, s);
    m.gemm(a, n, L.fc2, y);
    cuda::bias_act(y, L.fc2.b, n, hv, false, y, nullptr, s);
    cuda::add_inplace(x, y, n * hv, s);
  }
  // Projector on every patch, then each merge window's projected patches (consecutive rows) as one row.
  cuda::to_bf16(x, n * hv, a, s);
  m.gemm(a, n, m.proj1, y);
  cuda::bias_act(y, m.proj1.b, n, pr, true, nullptr, a, s);
  m.gemm(a, n, m.proj2, y);
  cuda::bias_act(y, m.proj2.b, n, h, false, nullptr, a, s);
  const int64_t tokens = n / m2;
  m.gemm(a, tokens, m.merge1, y);
  cuda::bias_act(y, m.merge1.b, tokens, pr, true, nullptr, a, s);
  m.gemm(a, tokens, m.merge2, y);
  cuda::bias_act(y, m.merge2.b, tokens, h, false, y, nullptr, s);
  std::vector<float> out(size_t(tokens) * h);
  check(cudaMemcpyAsync(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost, s), "d2h");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return out;
}

}  // namespace m3
