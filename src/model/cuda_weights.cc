// Device memory of the CUDA backend: where each checkpoint tensor lives in the fused layouts, the parallel
// upload from the memory-mapped shards (pinned staging, one stream per worker, progress bar, GB/s), synthetic
// weights generated on the device, and the KV pool.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "loader/dtype.h"
#include "loader/mxfp8.h"
#include "model/backend.h"
#include "model/cuda_model_impl.h"
#include "model/random_model.h"
#include "model/weight_layout.h"

namespace m3 {
namespace {

using cuda::bf16;

// Where a tensor's rows go: contiguous, or (gate / up of an MLP) as the first / second half of each 16-row
// block of an interleaved gate/up matrix (kernels.h).
enum class Interleave { kNone, kGateHalf, kUpHalf };
struct Target {
  void* dst = nullptr;
  size_t row_bytes = 0;
};
struct Placement {
  Target data, scale;  // scale.dst set: MXFP8 (data e4m3 bytes, scale one e8m0 byte per 32 inputs)
  Interleave mode = Interleave::kNone;
  size_t rows = 0;
  bool fp32 = false;
  bool fp8() const { return scale.dst != nullptr; }
  size_t bytes() const { return rows * (data.row_bytes + scale.row_bytes); }
};

// Copies `rows` rows starting at row0 of a tensor to its target; interleaved halves move in whole 8-row
// blocks.
void copy_rows(const Target& t, Interleave mode, size_t row0, const void* src, size_t rows,
               cudaMemcpyKind kind, cudaStream_t s) {
  if (rows == 0) return;
  uint8_t* base = static_cast<uint8_t*>(t.dst);
  if (mode == Interleave::kNone) {
    M3_CUDA_CHECK(cudaMemcpyAsync(base + row0 * t.row_bytes, src, rows * t.row_bytes, kind, s));
    return;
  }
  const size_t block = 8 * t.row_bytes;
  uint8_t* dst = base + ((row0 / 8) * 16 + (mode == Interleave::kUpHalf ? 8 : 0)) * t.row_bytes;
  M3_CUDA_CHECK(cudaMemcpy2DAsync(dst, 2 * block, src, block, block, rows / 8, kind, s));
}

// The fused weight slabs of a layer a linear tensor feeds (kNotLinear: norms, router, embedding, LM head).
enum Slab {
  kSlabIn,
  kSlabO,
  kSlabMlp13,
  kSlabMlp2,
  kSlabExp13,
  kSlabExp2,
  kSlabSh13,
  kSlabSh2,
  kSlabs,
  kNotLinear
};
Slab slab_of(WeightRole r, bool shared_fused) {
  switch (r) {
    case WeightRole::kQ:
    case WeightRole::kK:
    case WeightRole::kV:
    case WeightRole::kIndexQ:
    case WeightRole::kIndexK:
      return kSlabIn;
    case WeightRole::kO:
      return kSlabO;
    case WeightRole::kMlpGate:
    case WeightRole::kMlpUp:
      return kSlabMlp13;
    case WeightRole::kMlpDown:
      return kSlabMlp2;
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp:
      return kSlabExp13;
    case WeightRole::kExpertDown:
      return kSlabExp2;
    case WeightRole::kSharedGate:
    case WeightRole::kSharedUp:
      return shared_fused ? kSlabExp13 : kSlabSh13;
    case WeightRole::kSharedDown:
      return shared_fused ? kSlabExp2 : kSlabSh2;
    default:
      return kNotLinear;
  }
}

// A tensor's bytes on the host, ready to stage: this rank's rows of the data (and, for FP8 targets, of the
// scales), pointing into the mapped file when the stored form is the device form, else converted.
struct HostRows {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
  std::vector<uint8_t> data_buf, scale_buf;
};

// Rows [r0, r1) x bytes [c0, c1) of a row-major [rows, row_bytes] tensor, contiguous.
const uint8_t* gather(const uint8_t* src, size_t row_bytes, const TensorCut& cut, size_t rows, size_t elem,
                      size_t unit, std::vector<uint8_t>& buf) {
  if (cut.dim != 1) return src + (cut.dim == 0 ? size_t(cut.begin) * row_bytes : 0);
  const size_t c0 = size_t(cut.begin) / unit * elem, width = size_t(cut.end - cut.begin) / unit * elem;
  buf.resize(rows * width);
  for (size_t r = 0; r < rows; ++r) std::memcpy(buf.data() + r * width, src + r * row_bytes + c0, width);
  return buf.data();
}

HostRows host_rows_as_stored(const ModelConfig& c, const Checkpoint& ckpt, const std::string& name,
                             const WeightSpec& spec, const TensorCut& cut, const Placement& p);

// This rank's rows of checkpoint tensor `name` in the form its placement takes: bf16 / fp32 as stored or
// converted, MXFP8 as stored (with its scales) or quantised here (loader/mxfp8.h); the router's rows in the
// order of the expert placement.
HostRows host_rows(const ModelConfig& c, const Checkpoint& ckpt, const std::string& name,
                   const WeightSpec& spec, const TensorCut& cut, const Placement& p) {
  HostRows h = host_rows_as_stored(c, ckpt, name, spec, cut, p);
  if ((spec.role != WeightRole::kRouter && spec.role != WeightRole::kRouterBias) ||
      c.expert_placement.empty())
    return h;
  std::vector<uint8_t> rows(h.data, h.data + p.rows * p.data.row_bytes);  // fp32 (Placement::fp32)
  const int64_t floats = int64_t(rows.size() / 4);  // the weight [E, H] or the bias [E] (one row of E)
  place_router_rows(c, reinterpret_cast<float*>(rows.data()), floats / c.num_experts);
  h.data_buf = std::move(rows);
  h.data = h.data_buf.data();
  return h;
}

HostRows host_rows_as_stored(const ModelConfig& c, const Checkpoint& ckpt, const std::string& name,
                             const WeightSpec& spec, const TensorCut& cut, const Placement& p) {
  HostRows h;
  const TensorRef& ref = ckpt.at(name);
  const bool same_shape = ref.info->shape == spec.shape;
  const size_t full_cols = size_t(spec.shape.back());
  const DType want = p.fp32 ? DType::kF32 : DType::kBF16;
  auto check_scales = [&](const uint8_t* sc) {
    for (size_t k = 0; k < p.rows * p.scale.row_bytes; ++k)
      if (sc[k] > cuda::kMaxFp8Scale)
        fail(ErrorKind::kUnsupported, "tensor '" + name + "': an MXFP8 block scale of 2^" +
                                          std::to_string(int(sc[k]) - 127) + " (weights above " +
                                          std::to_string(448 << (cuda::kMaxFp8Scale - 127)) +
                                          ") is beyond what the FP8 kernels take");
  };
  if (p.fp8() && ref.info->dtype == DType::kF8E4M3 && same_shape) {  // MXFP8 kept as stored
    const std::string scale_name = name + "_scale_inv";
    const std::vector<int64_t> scale_shape{spec.shape[0], spec.shape[1] / cuda::kFp8Block};
    const TensorRef* sref = ckpt.has(scale_name) ? &ckpt.at(scale_name) : nullptr;
    if (!sref || sref->info->dtype != DType::kU8 || sref->info->shape != scale_shape)
      fail(ErrorKind::kCorruptData, "tensor '" + name + "' is fp8-e4m3 but has no U8 companion '" +
                                        scale_name + "' of shape " + shape_string(scale_shape));
    h.data = gather(ref.file->tensor_data(*ref.info), full_cols, cut, p.rows, 1, 1, h.data_buf);
    h.scale = gather(sref->file->tensor_data(*sref->info), full_cols / cuda::kFp8Block, cut, p.rows, 1,
                     cuda::kFp8Block, h.scale_buf);
    check_scales(h.scale);
    return h;
  }
  if (!p.fp8() && ref.info->dtype == want && same_shape) {  // bf16 / fp32 as stored
    const size_t esize = p.fp32 ? 4 : 2;
    h.data = gather(ref.file->tensor_data(*ref.info), full_cols * esize, cut, p.rows, esize, 1, h.data_buf);
    return h;
  }
  const std::vector<float> f = ckpt.read_f32(name, spec.shape, c.quant_block, cut);  // checks the shape
  const size_t cols = f.size() / p.rows;
  if (p.fp32) {
    h.data_buf.resize(f.size() * 4);
    std::memcpy(h.data_buf.data(), f.data(), h.data_buf.size());
  } else if (p.fp8()) {  // --quantization fp8
    h.data_buf.resize(f.size());
    h.scale_buf.resize(f.size() / cuda::kFp8Block);
    for (size_t r = 0; r < p.rows; ++r)
      if (!quantize_mxfp8_row(f.data() + r * cols, int64_t(cols), h.data_buf.data() + r * cols,
                              h.scale_buf.data() + r * (cols / cuda::kFp8Block)))
        fail(ErrorKind::kCorruptData, "tensor '" + name + "' holds a value that is not finite");
    check_scales(h.scale_buf.data());
  } else {
    h.data_buf.resize(f.size() * 2);
    for (size_t k = 0; k < f.size(); ++k)
      reinterpret_cast<uint16_t*>(h.data_buf.data())[k] = f32_to_bf16(f[k]);
  }
  h.data = h.data_buf.data();
  h.scale = h.scale_buf.empty() ? nullptr : h.scale_buf.data();
  return h;
}

// Fills the placements from the memory-mapped shards on parallel workers, each with a pinned staging buffer
// and its own stream, with a progress bar on a terminal.
void upload_weights(const ModelConfig& c, const Checkpoint& ckpt, const std::vector<WeightSpec>& specs,
                    const std::vector<std::string>& names, const std::vector<TensorCut>& cuts,
                    const std::vector<Placement>& place, uint64_t total,
                    std::chrono::steady_clock::time_point t0) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    constexpr size_t kStage = 64u << 20;
    void* stage = nullptr;
    cudaStream_t st = nullptr;
    try {
      M3_CUDA_CHECK(cudaMallocHost(&stage, kStage));
      M3_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      uint8_t* staged = static_cast<uint8_t*>(stage);
      for (size_t i; (i = next++) < specs.size();) {
        const Placement& p = place[i];
        const HostRows h = host_rows(c, ckpt, names[i], specs[i], cuts[i], p);
        const size_t per_row = p.data.row_bytes + p.scale.row_bytes;
        const size_t unit = p.mode == Interleave::kNone ? 1 : 8;
        const size_t chunk = std::max(unit, kStage / per_row / unit * unit);
        if (chunk * per_row > kStage)
          fail(ErrorKind::kUnsupported, names[i] + ": rows too wide for the staging buffer");
        for (size_t r0 = 0; r0 < p.rows; r0 += chunk) {
          const size_t n = std::min(chunk, p.rows - r0);
          std::memcpy(staged, h.data + r0 * p.data.row_bytes, n * p.data.row_bytes);
          copy_rows(p.data, p.mode, r0, staged, n, cudaMemcpyHostToDevice, st);
          if (p.fp8()) {
            uint8_t* sc = staged + n * p.data.row_bytes;
            std::memcpy(sc, h.scale + r0 * p.scale.row_bytes, n * p.scale.row_bytes);
            copy_rows(p.scale, p.mode, r0, sc, n, cudaMemcpyHostToDevice, st);
          }
          M3_CUDA_CHECK(cudaStreamSynchronize(st));
          done += n * per_row;
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = specs.size();
    }
    if (st) cudaStreamDestroy(st);
    if (stage) cudaFreeHost(stage);
  };
  const unsigned workers = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) pool.emplace_back(worker);
  const bool tty = isatty(2);
  auto last_print = t0;
  while (done.load() < total && !error) {  // progress bar on a terminal, redrawn every 200 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto now = std::chrono::steady_clock::now();
    if (!tty || now - last_print < std::chrono::milliseconds(200)) continue;
    last_print = now;
    const double secs = std::chrono::duration<double>(now - t0).count();
    const double frac = double(done.load()) / double(std::max<uint64_t>(total, 1));
    std::fprintf(stderr, "\rloading weights [%-30s] %3.0f%% %.1f/%.1f GB %.2f GB/s",
                 std::string(size_t(frac * 30), '#').c_str(), frac * 100, done.load() / 1e9, total / 1e9,
                 done.load() / 1e9 / std::max(secs, 1e-9));
  }
  for (auto& t : pool) t.join();
  if (tty) std::fprintf(stderr, "\n");
  if (error) std::rethrow_exception(error);
}

}  // namespace

CudaModel::Impl::~Impl() {
  free_host_tier();
  free_kv();
  for (void* p : owned) cudaFree(p);
  for (auto& [n, b] : scratch) cudaFree(b.first);
  if (blas_workspace) cudaFree(blas_workspace);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
}

Weight CudaModel::Impl::own_weight(size_t rows, int K, bool fp8) {
  Weight w;
  if (!fp8) {
    w.w = own<bf16>(rows * size_t(K));
    return w;
  }
  w.q = own<uint8_t>(rows * size_t(K));
  w.s = own<uint8_t>(rows * size_t(K) / cuda::kFp8Block);
  return w;
}

// Synthetic weights (--load-format dummy): model/random_model.h's values generated on the device as bf16 and
// placed, FP8 targets quantised on the device (what a bf16 checkpoint with --quantization fp8 gives).
static void generate_weights(CudaModel::Impl& m, const std::vector<WeightSpec>& specs,
                             const std::vector<Placement>& place, uint64_t random_seed) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const Placement& p = place[i];
    const uint64_t key = random_weight_key(random_seed, specs[i]);
    const float scale = random_weight_scale(specs[i]);
    const size_t cols = p.data.row_bytes / (p.fp8() ? 1 : p.fp32 ? 4 : 2), n = p.rows * cols;
    if (!p.fp8() && p.mode == Interleave::kNone) {  // generated in place
      cuda::fill_random(p.data.dst, p.fp32, int64_t(n), key, scale, m.stream);
      continue;
    }
    uint8_t* tmp =
        static_cast<uint8_t*>(m.scratch_alloc_tmp(n * 2 + (p.fp8() ? n + n / cuda::kFp8Block : 0)));
    cuda::fill_random(tmp, false, int64_t(n), key, scale, m.stream);
    if (p.fp8()) {
      uint8_t *q = tmp + n * 2, *sc = q + n;
      cuda::quantize_mxfp8(reinterpret_cast<const bf16*>(tmp), int64_t(p.rows), int(cols), q, sc, m.stream);
      copy_rows(p.data, p.mode, 0, q, p.rows, cudaMemcpyDeviceToDevice, m.stream);
      copy_rows(p.scale, p.mode, 0, sc, p.rows, cudaMemcpyDeviceToDevice, m.stream);
    } else {
      copy_rows(p.data, p.mode, 0, tmp, p.rows, cudaMemcpyDeviceToDevice, m.stream);
    }
    M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the temporary may move for the next tensor
  }
  M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.scratch_free_tmp();
}

// Before the first allocation: this rank's weights against the GPU's free memory, so that a model too large
// for the layout is a startup error that names both sizes and the ways out, not an out-of-memory from
// cudaMalloc.
void CudaModel::Impl::check_weights_fit(const std::vector<WeightSpec>& specs,
                                        const std::vector<TensorCut>& cuts,
                                        const std::function<bool(const WeightSpec&)>& is_fp8) const {
  uint64_t need = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = 1;
    for (size_t d = 0; d < specs[i].shape.size(); ++d)
      n *= uint64_t(int(d) == cuts[i].dim ? cuts[i].end - cuts[i].begin : specs[i].shape[d]);
    const bool fp32 = specs[i].role == WeightRole::kRouter || specs[i].role == WeightRole::kRouterBias;
    need += fp32 ? 4 * n : is_fp8(specs[i]) ? n + n / cuda::kFp8Block : 2 * n;
  }
  size_t free_bytes = 0, total_bytes = 0;
  M3_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (need <= free_bytes) return;
  char msg[512];
  std::snprintf(
      msg, sizeof msg,
      "the weights do not fit: this rank's share is %.1f GB and GPU %d has %.1f GB free of %.1f GB; "
      "use more GPUs (--tensor-parallel-size, --data-parallel-size with --enable-expert-parallel)%s",
      need / 1e9, opt.device, free_bytes / 1e9, total_bytes / 1e9,
      opt.quantization == "fp8" ? "" : " or FP8 weights (--quantization fp8)");
  fail(ErrorKind::kUnsupported, msg);
}

void CudaModel::Impl::load_weights(const Checkpoint* ckpt, uint64_t random_seed) {
  const auto t0 = std::chrono::steady_clock::now();
  // The shard's dimensions (the whole model with one rank).
  const int H = c.hidden_size, D = c.head_dim, Hq = hq, Hkv = hkv;
  const int Hi = hkv, Di = c.msa.index_head_dim;          // one index query head per KV group
  const int E = int(shard.experts.size()), I = expert_i;  // the routed experts held here
  std::vector<WeightSpec> specs = weight_layout(c);
  std::vector<std::string> names = ckpt ? resolve_weight_names(*ckpt, specs) : std::vector<std::string>{};
  keep_local_experts(shard, specs, ckpt ? &names : nullptr);
  std::vector<TensorCut> cuts(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) cuts[i] = shard_cut(specs[i], c, shard);
  shared_fused = shared_i == I;
  layers.resize(c.num_layers);

  // FP8 slabs: all of them with --quantization fp8 (quantised here), else those whose every tensor the
  // checkpoint stores as MXFP8 with 32-input blocks (kept as stored); the rest are bf16 (MXFP8 parts
  // dequantised, exactly).
  const bool online = opt.quantization == "fp8";
  std::vector<std::array<bool, kSlabs>> fp8(c.num_layers);
  for (auto& f : fp8)
    f.fill(online || (ckpt && c.weight_quant == WeightQuant::kMxfp8 && c.quant_block == 32));
  if (ckpt && !online)
    for (size_t i = 0; i < specs.size(); ++i) {
      const Slab sl = slab_of(specs[i].role, shared_fused);
      if (sl != kNotLinear && ckpt->at(names[i]).info->dtype != DType::kF8E4M3)
        fp8[specs[i].layer][sl] = false;
    }
  const int slab_k[kSlabs] = {H, Hq * D, H, dense_i, H, I, H, shared_i};
  int fp8_slabs = 0, slabs = 0;
  for (int l = 0; l < c.num_layers; ++l)
    for (int sl = 0; sl < kSlabs; ++sl) {
      if (!fp8[l][sl]) continue;
      if (slab_k[sl] % cuda::kFp8Block != 0)
        fail(ErrorKind::kUnsupported,
             "FP8 weights need every linear layer's input width (per rank) to be a "
             "multiple of 32; layer " +
                 std::to_string(l) + " has " + std::to_string(slab_k[sl]));
    }

  check_weights_fit(specs, cuts, [&](const WeightSpec& s) {
    const Slab sl = slab_of(s.role, shared_fused);
    return sl != kNotLinear && fp8[s.layer][sl];
  });

  for (int l = 0; l < c.num_layers; ++l) {  // the fused allocations
    Layer& L = layers[l];
    L.n_in = (Hq + 2 * Hkv) * D + (c.sparse_attention[l] ? Hi * Di + Di : 0);
    max_n_in = std::max(max_n_in, L.n_in);
    L.w_in = own_weight(L.n_in, H, fp8[l][kSlabIn]);
    L.o = own_weight(H, Hq * D, fp8[l][kSlabO]);
    slabs += 2, fp8_slabs += fp8[l][kSlabIn] + fp8[l][kSlabO];
    if (c.moe[l]) {
      const int G = E + (shared_fused ? 1 : 0);
      L.exp_w13 = own_weight(size_t(G) * 2 * I, H, fp8[l][kSlabExp13]);
      L.exp_w2 = own_weight(size_t(G) * H, I, fp8[l][kSlabExp2]);
      slabs += 2, fp8_slabs += fp8[l][kSlabExp13] + fp8[l][kSlabExp2];
      if (!shared_fused) {
        L.sh_w13 = own_weight(size_t(2) * shared_i, H, fp8[l][kSlabSh13]);
        L.sh_w2 = own_weight(H, shared_i, fp8[l][kSlabSh2]);
        slabs += 2, fp8_slabs += fp8[l][kSlabSh13] + fp8[l][kSlabSh2];
      }
    } else {
      L.mlp_w13 = own_weight(size_t(2) * dense_i, H, fp8[l][kSlabMlp13]);
      L.mlp_w2 = own_weight(H, dense_i, fp8[l][kSlabMlp2]);
      slabs += 2, fp8_slabs += fp8[l][kSlabMlp13] + fp8[l][kSlabMlp2];
    }
  }
  // Pass 1: a placement for every tensor.
  std::vector<Placement> place(specs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    std::vector<int64_t> shape = s.shape;  // this rank's part
    if (cuts[i].dim >= 0) shape[cuts[i].dim] = cuts[i].end - cuts[i].begin;
    const size_t cols = size_t(shape.back()), rows = shape.size() == 2 ? size_t(shape[0]) : 1;
    Placement& p = place[i];
    p.rows = rows;
    p.fp32 = s.role == WeightRole::kRouter || s.role == WeightRole::kRouterBias;
    p.data.row_bytes = cols * (p.fp32 ? 4 : 2);
    Layer* L = s.layer >= 0 ? &layers[s.layer] : nullptr;
    // Rows [row0, ...) of a slab (K columns), and where that slab's tensor lands.
    auto at = [&](const Weight& w, size_t row0, Interleave mode = Interleave::kNone) {
      const Weight r = w.rows(row0, int(cols));
      p.mode = mode;
      if (!r.fp8()) {
        p.data.dst = r.w;
        return;
      }
      p.data = {r.q, cols};
      p.scale = {r.s, cols / cuda::kFp8Block};
    };
    auto bf16_tensor = [&](bf16*& field) { p.data.dst = field = own<bf16>(rows * cols); };
    const size_t G13 = size_t(2) * I, G2 = size_t(H);  // rows per expert of the slabs
    switch (s.role) {
      case WeightRole::kRouter:
        p.data.dst = L->router = own<float>(rows * cols);
        break;
      case WeightRole::kRouterBias:
        p.data.dst = L->router_bias = own<float>(rows * cols);
        break;
      case WeightRole::kEmbed:  // vocabulary rows, zero-padded to an equal count on every rank
        p.data.dst = embed = own<bf16>(size_t(vocab_rows) * H);
        M3_CUDA_CHECK(cudaMemsetAsync(embed, 0, size_t(vocab_rows) * H * 2, stream));
        break;
      case WeightRole::kLmHead:
        p.data.dst = lm_head = own<bf16>(size_t(vocab_rows) * H);
        M3_CUDA_CHECK(cudaMemsetAsync(lm_head, 0, size_t(vocab_rows) * H * 2, stream));
        break;
      case WeightRole::kFinalNorm:
        bf16_tensor(final_norm);
        break;
      case WeightRole::kInputNorm:
        bf16_tensor(L->in_norm);
        break;
      case WeightRole::kPostNorm:
        bf16_tensor(L->post_norm);
        break;
      case WeightRole::kQNorm:
        bf16_tensor(L->q_norm);
        break;
      case WeightRole::kKNorm:
        bf16_tensor(L->k_norm);
        break;
      case WeightRole::kIndexQNorm:
        bf16_tensor(L->iq_norm);
        break;
      case WeightRole::kIndexKNorm:
        bf16_tensor(L->ik_norm);
        break;
      case WeightRole::kO:
        at(L->o, 0);
        break;
      case WeightRole::kQ:
        at(L->w_in, 0);
        break;
      case WeightRole::kK:
        at(L->w_in, size_t(Hq) * D);
        break;
      case WeightRole::kV:
        at(L->w_in, size_t(Hq + Hkv) * D);
        break;
      case WeightRole::kIndexQ:
        at(L->w_in, size_t(Hq + 2 * Hkv) * D);
        break;
      case WeightRole::kIndexK:
        at(L->w_in, size_t(Hq + 2 * Hkv) * D + size_t(Hi) * Di);
        break;
      case WeightRole::kMlpGate:
        at(L->mlp_w13, 0, Interleave::kGateHalf);
        break;
      case WeightRole::kMlpUp:
        at(L->mlp_w13, 0, Interleave::kUpHalf);
        break;
      case WeightRole::kMlpDown:
        at(L->mlp_w2, 0);
        break;
      case WeightRole::kExpertGate:
        at(L->exp_w13, (s.expert - shard.experts.begin) * G13, Interleave::kGateHalf);
        break;
      case WeightRole::kExpertUp:
        at(L->exp_w13, (s.expert - shard.experts.begin) * G13, Interleave::kUpHalf);
        break;
      case WeightRole::kExpertDown:
        at(L->exp_w2, (s.expert - shard.experts.begin) * G2);
        break;
      case WeightRole::kSharedGate:
        at(shared_fused ? L->exp_w13 : L->sh_w13, shared_fused ? E * G13 : 0, Interleave::kGateHalf);
        break;
      case WeightRole::kSharedUp:
        at(shared_fused ? L->exp_w13 : L->sh_w13, shared_fused ? E * G13 : 0, Interleave::kUpHalf);
        break;
      case WeightRole::kSharedDown:
        at(shared_fused ? L->exp_w2 : L->sh_w2, shared_fused ? E * G2 : 0);
        break;
    }
    total += p.bytes();
  }
  if (ckpt)
    upload_weights(c, *ckpt, specs, names, cuts, place, total, t0);
  else
    generate_weights(*this, specs, place, random_seed);
  if (c.tie_word_embeddings) lm_head = embed;
  weight_bytes = total;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("cuda: ", ckpt ? "loaded " : "generated ", specs.size(), " tensors, ", total / 1e9, " GB in ",
           secs, " s (", total / 1e9 / secs, " GB/s); linear weights ",
           fp8_slabs == 0       ? "bf16"
           : fp8_slabs == slabs ? "fp8 (MXFP8)"
                                : "fp8 (MXFP8) and bf16",
           online && ckpt ? ", quantised at load" : "");
}

void* CudaModel::Impl::scratch_alloc_tmp(size_t bytes) {
  return buf<uint8_t>("weights.tmp", bytes);
}
void CudaModel::Impl::scratch_free_tmp() {
  auto it = scratch.find("weights.tmp");
  if (it == scratch.end()) return;
  cudaFree(it->second.first);
  scratch.erase(it);
}

size_t CudaModel::Impl::kv_bytes_per_page() const {
  return cuda_kv_bytes_per_page(c, hkv, opt.kv_fp8);
}

void CudaModel::Impl::allocate_kv(int pages) {
  free_kv();
  const size_t slots = size_t(pages) * c.msa.block_size;
  auto alloc = [&]<typename T>(T*& p, size_t n) {
    M3_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)));
    kv_owned.push_back(p);
  };
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& L = layers[l];
    if (opt.kv_fp8) {
      alloc(L.k8, slots * kv_size());
      alloc(L.v8, slots * kv_size());
      alloc(L.k_scale, slots * hkv);
      alloc(L.v_scale, slots * hkv);
    } else {
      alloc(L.k_cache, slots * kv_size());
      alloc(L.v_cache, slots * kv_size());
    }
    L.idx_cache = nullptr;
    if (c.sparse_attention[l]) alloc(L.idx_cache, slots * c.msa.index_head_dim);
  }
}

void CudaModel::fill_kv_random(uint64_t seed) {
  Impl& m = *impl_;
  const size_t slots = size_t(num_pages_ + 1) * config_.msa.block_size;
  for (Impl::Layer& L : m.layers) {
    if (L.k8) {  // random e4m3 values and scales (speed measurements only read them)
      cuda::fill_random_e4m3(L.k8, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
      cuda::fill_random_e4m3(L.v8, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
      cuda::fill_random(L.k_scale, true, int64_t(slots * m.hkv), seed++ << 40, 0.1f, m.stream);
      cuda::fill_random(L.v_scale, true, int64_t(slots * m.hkv), seed++ << 40, 0.1f, m.stream);
    } else {
      cuda::fill_random(L.k_cache, false, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
      cuda::fill_random(L.v_cache, false, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
    }
    if (L.idx_cache)
      cuda::fill_random(L.idx_cache, false, int64_t(slots * config_.msa.index_head_dim), seed++ << 40, 1.0f,
                        m.stream);
  }
  M3_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaModel::Impl::free_kv() {
  for (void* p : kv_owned) cudaFree(p);
  kv_owned.clear();
}

}  // namespace m3
