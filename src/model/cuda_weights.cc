// Device memory of the CUDA backend: where each checkpoint tensor lives in the fused layouts, the parallel
// upload from the memory-mapped shards (pinned staging, one stream per worker, progress bar, GB/s), synthetic
// weights generated on the device, and the KV pool.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "loader/dtype.h"
#include "model/cuda_model_impl.h"
#include "model/random_model.h"
#include "model/weight_layout.h"

namespace m3 {
namespace {

using cuda::bf16;

// Where a tensor goes: contiguous at dst, or (gate / up of an MLP) as the first / second half of each 16-row
// block of an interleaved gate/up matrix (kernels.h).
struct Placement {
  void* dst = nullptr;
  enum Mode { kContiguous, kGateHalf, kUpHalf } mode = kContiguous;
  size_t row_bytes = 0;
  size_t bytes = 0;
  bool fp32 = false;
};

// Copies bytes [off, off + n) of a tensor to its placement; for interleaved halves off and n are whole
// multiples of 8 rows.
void copy_placed(const Placement& p, size_t off, const void* src, size_t n, cudaMemcpyKind kind,
                 cudaStream_t s) {
  if (p.mode == Placement::kContiguous) {
    M3_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(p.dst) + off, src, n, kind, s));
    return;
  }
  const size_t block = 8 * p.row_bytes;
  uint8_t* dst = static_cast<uint8_t*>(p.dst) +
                 ((off / block) * 16 + (p.mode == Placement::kUpHalf ? 8 : 0)) * p.row_bytes;
  M3_CUDA_CHECK(cudaMemcpy2DAsync(dst, 2 * block, src, block, block, n / block, kind, s));
}

}  // namespace

CudaModel::Impl::~Impl() {
  free_kv();
  for (void* p : owned) cudaFree(p);
  for (auto& [n, b] : scratch) cudaFree(b.first);
  if (blas_workspace) cudaFree(blas_workspace);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
}

void CudaModel::Impl::load_weights(const Checkpoint* ckpt, uint64_t random_seed) {
  const auto t0 = std::chrono::steady_clock::now();
  // The shard's dimensions (the whole model with one rank).
  const int H = c.hidden_size, D = c.head_dim, Hq = hq, Hkv = hkv;
  const int Hi = hkv, Di = c.msa.index_head_dim;  // one index query head per KV group
  const int E = c.num_experts, I = expert_i;
  const std::vector<WeightSpec> specs = weight_layout(c);
  const std::vector<std::string> names =
      ckpt ? resolve_weight_names(*ckpt, specs) : std::vector<std::string>{};
  std::vector<TensorCut> cuts(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) cuts[i] = shard_cut(specs[i], c, shard);
  shared_fused = shared_i == I;
  layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {  // the fused allocations
    Layer& L = layers[l];
    L.n_in = (Hq + 2 * Hkv) * D + (c.sparse_attention[l] ? Hi * Di + Di : 0);
    max_n_in = std::max(max_n_in, L.n_in);
    L.w_in = own<bf16>(size_t(L.n_in) * H);
    if (c.moe[l]) {
      const int G = E + (shared_fused ? 1 : 0);
      L.exp_w13 = own<bf16>(size_t(G) * 2 * I * H);
      L.exp_w2 = own<bf16>(size_t(G) * H * I);
      if (!shared_fused) {
        L.sh_w13 = own<bf16>(size_t(2) * shared_i * H);
        L.sh_w2 = own<bf16>(size_t(H) * shared_i);
      }
    } else {
      L.mlp_w13 = own<bf16>(size_t(2) * dense_i * H);
      L.mlp_w2 = own<bf16>(size_t(H) * dense_i);
    }
  }
  // Pass 1: a placement for every tensor.
  std::vector<Placement> place(specs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    std::vector<int64_t> shape = s.shape;  // this rank's part
    if (cuts[i].dim >= 0) shape[cuts[i].dim] = cuts[i].end - cuts[i].begin;
    size_t numel = 1;
    for (int64_t d : shape) numel *= size_t(d);
    Placement& p = place[i];
    p.fp32 = s.role == WeightRole::kRouter || s.role == WeightRole::kRouterBias;
    p.bytes = numel * (p.fp32 ? 4 : 2);
    p.row_bytes = size_t(shape.back()) * 2;
    total += p.bytes;
    Layer* L = s.layer >= 0 ? &layers[s.layer] : nullptr;
    const size_t row_h = size_t(H);  // elements per row of an input projection
    auto fused_in = [&](size_t first_row) { return L->w_in + first_row * row_h; };
    auto half = [&](bf16* w13, Placement::Mode m) {
      p.dst = w13;
      p.mode = m;
    };
    const int G13 = 2 * I * H, G2 = H * I;
    switch (s.role) {
      case WeightRole::kRouter:
        p.dst = L->router = own<float>(numel);
        break;
      case WeightRole::kRouterBias:
        p.dst = L->router_bias = own<float>(numel);
        break;
      case WeightRole::kEmbed:  // vocabulary rows, zero-padded to an equal count on every rank
        p.dst = embed = own<bf16>(size_t(vocab_rows) * H);
        M3_CUDA_CHECK(cudaMemsetAsync(embed, 0, size_t(vocab_rows) * H * 2, stream));
        break;
      case WeightRole::kLmHead:
        p.dst = lm_head = own<bf16>(size_t(vocab_rows) * H);
        M3_CUDA_CHECK(cudaMemsetAsync(lm_head, 0, size_t(vocab_rows) * H * 2, stream));
        break;
      case WeightRole::kFinalNorm:
        p.dst = final_norm = own<bf16>(numel);
        break;
      case WeightRole::kInputNorm:
        p.dst = L->in_norm = own<bf16>(numel);
        break;
      case WeightRole::kPostNorm:
        p.dst = L->post_norm = own<bf16>(numel);
        break;
      case WeightRole::kO:
        p.dst = L->o = own<bf16>(numel);
        break;
      case WeightRole::kQNorm:
        p.dst = L->q_norm = own<bf16>(numel);
        break;
      case WeightRole::kKNorm:
        p.dst = L->k_norm = own<bf16>(numel);
        break;
      case WeightRole::kIndexQNorm:
        p.dst = L->iq_norm = own<bf16>(numel);
        break;
      case WeightRole::kIndexKNorm:
        p.dst = L->ik_norm = own<bf16>(numel);
        break;
      case WeightRole::kQ:
        p.dst = fused_in(0);
        break;
      case WeightRole::kK:
        p.dst = fused_in(size_t(Hq) * D);
        break;
      case WeightRole::kV:
        p.dst = fused_in(size_t(Hq + Hkv) * D);
        break;
      case WeightRole::kIndexQ:
        p.dst = fused_in(size_t(Hq + 2 * Hkv) * D);
        break;
      case WeightRole::kIndexK:
        p.dst = fused_in(size_t(Hq + 2 * Hkv) * D + size_t(Hi) * Di);
        break;
      case WeightRole::kMlpGate:
        half(L->mlp_w13, Placement::kGateHalf);
        break;
      case WeightRole::kMlpUp:
        half(L->mlp_w13, Placement::kUpHalf);
        break;
      case WeightRole::kMlpDown:
        p.dst = L->mlp_w2;
        break;
      case WeightRole::kExpertGate:
        half(L->exp_w13 + size_t(s.expert) * G13, Placement::kGateHalf);
        break;
      case WeightRole::kExpertUp:
        half(L->exp_w13 + size_t(s.expert) * G13, Placement::kUpHalf);
        break;
      case WeightRole::kExpertDown:
        p.dst = L->exp_w2 + size_t(s.expert) * G2;
        break;
      case WeightRole::kSharedGate:
        half(shared_fused ? L->exp_w13 + size_t(E) * G13 : L->sh_w13, Placement::kGateHalf);
        break;
      case WeightRole::kSharedUp:
        half(shared_fused ? L->exp_w13 + size_t(E) * G13 : L->sh_w13, Placement::kUpHalf);
        break;
      case WeightRole::kSharedDown:
        p.dst = shared_fused ? L->exp_w2 + size_t(E) * G2 : L->sh_w2;
        break;
    }
  }

  if (!ckpt) {  // synthetic weights: generated in place (interleaved halves through one temporary)
    for (size_t i = 0; i < specs.size(); ++i) {
      const Placement& p = place[i];
      const int64_t n = int64_t(p.bytes / (p.fp32 ? 4 : 2));
      const uint64_t key = random_weight_key(random_seed, specs[i]);
      const float scale = random_weight_scale(specs[i]);
      if (p.mode == Placement::kContiguous) {
        cuda::fill_random(p.dst, p.fp32, n, key, scale, stream);
        continue;
      }
      bf16* tmp = static_cast<bf16*>(scratch_alloc_tmp(p.bytes));  // grows to the widest half
      cuda::fill_random(tmp, false, n, key, scale, stream);
      copy_placed(p, 0, tmp, p.bytes, cudaMemcpyDeviceToDevice, stream);
      M3_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    M3_CUDA_CHECK(cudaStreamSynchronize(stream));
    scratch_free_tmp();
  } else {
    // Pass 2: fill from the mmapped shards on parallel workers, each with a pinned staging buffer and its
    // own stream. bf16 (and fp32 router) tensors are copied as stored; other dtypes (fp8 + scales, fp16,
    // fp32) are converted on the host first.
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
        for (size_t i; (i = next++) < specs.size();) {
          const Placement& p = place[i];
          const TensorRef& ref = ckpt->at(names[i]);
          const DType want = p.fp32 ? DType::kF32 : DType::kBF16;
          const TensorCut& cut = cuts[i];
          std::vector<uint8_t> converted;
          const uint8_t* src = ref.file->tensor_data(*ref.info);
          const bool as_stored = ref.info->dtype == want && ref.info->shape == specs[i].shape;
          if (as_stored && cut.dim == 0) {  // a range of whole rows: a pointer into the mapped file
            src += size_t(cut.begin) * (p.bytes / size_t(cut.end - cut.begin));
          } else if (as_stored && cut.dim == 1) {  // a range of columns: gathered row by row
            const size_t esize = p.fp32 ? 4 : 2, cols = size_t(specs[i].shape[1]),
                         width = cut.end - cut.begin;
            converted.resize(p.bytes);
            for (size_t r = 0; r < p.bytes / (width * esize); ++r)
              std::memcpy(converted.data() + r * width * esize, src + (r * cols + cut.begin) * esize,
                          width * esize);
            src = converted.data();
          } else if (!as_stored) {
            const std::vector<float> f =
                ckpt->read_f32(names[i], specs[i].shape, c.quant_block, cut);  // checks shape
            converted.resize(p.bytes);
            if (p.fp32)
              std::memcpy(converted.data(), f.data(), p.bytes);
            else
              for (size_t k = 0; k < f.size(); ++k)
                reinterpret_cast<uint16_t*>(converted.data())[k] = f32_to_bf16(f[k]);
            src = converted.data();
          }
          const size_t unit = p.mode == Placement::kContiguous ? 1 : 8 * p.row_bytes;
          const size_t chunk = std::max(unit, kStage / unit * unit);
          if (chunk > kStage)
            fail(ErrorKind::kUnsupported, names[i] + ": rows too wide for the staging buffer");
          for (size_t off = 0; off < p.bytes; off += chunk) {
            const size_t n = std::min(chunk, p.bytes - off);
            std::memcpy(stage, src + off, n);
            copy_placed(p, off, stage, n, cudaMemcpyHostToDevice, st);
            M3_CUDA_CHECK(cudaStreamSynchronize(st));
            done += n;
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
  if (c.tie_word_embeddings) lm_head = embed;
  weight_bytes = total;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("cuda: ", ckpt ? "loaded " : "generated ", specs.size(), " tensors, ", total / 1e9, " GB in ",
           secs, " s (", total / 1e9 / secs, " GB/s)");
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
  size_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l)
    bytes +=
        size_t(c.msa.block_size) * (2 * kv_size() + (c.sparse_attention[l] ? c.msa.index_head_dim : 0)) * 2;
  return bytes;
}

void CudaModel::Impl::allocate_kv(int pages) {
  free_kv();
  const size_t slots = size_t(pages) * c.msa.block_size;
  auto alloc = [&](size_t n) {
    void* p = nullptr;
    M3_CUDA_CHECK(cudaMalloc(&p, n * sizeof(bf16)));
    kv_owned.push_back(p);
    return static_cast<bf16*>(p);
  };
  for (int l = 0; l < c.num_layers; ++l) {
    Layer& L = layers[l];
    L.k_cache = alloc(slots * kv_size());
    L.v_cache = alloc(slots * kv_size());
    L.idx_cache = c.sparse_attention[l] ? alloc(slots * c.msa.index_head_dim) : nullptr;
  }
}

void CudaModel::fill_kv_random(uint64_t seed) {
  Impl& m = *impl_;
  const size_t slots = size_t(num_pages_ + 1) * config_.msa.block_size;
  for (Impl::Layer& L : m.layers) {
    cuda::fill_random(L.k_cache, false, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
    cuda::fill_random(L.v_cache, false, int64_t(slots * m.kv_size()), seed++ << 40, 1.0f, m.stream);
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
