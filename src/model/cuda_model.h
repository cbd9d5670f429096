// The CUDA backend: the same forward pass as the CPU reference on the GPU. BF16 weights and KV pages, fp32
// residual stream and accumulation, fused input projections and gate/up GEMMs (cuBLAS), kernels from
// src/kernels: device-side MoE grouping with a grouped tensor-core GEMV for small batches (no host sync),
// decode steps replayed from CUDA graphs per batch-size bucket, and a memory plan (weights, a profiled
// activation peak, then the KV pool from --gpu-memory-utilization). Tensor parallel as the CPU backend is
// (config/shard_layout.h): the shard's heads, widths and vocabulary rows, NCCL all-reduces after the
// o-projection and the FFN and of the embedding, an all-gather of the logits; one code path for TP 1..N.
// With data-parallel attention (DEP) each rank runs its own sequences with the whole attention and the MoE
// layers exchange tokens over NCCL (cuda_ffn.cc); such steps run eagerly.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/shard_layout.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "loader/checkpoint.h"
#include "model/backend.h"

namespace m3 {

struct CudaModelOptions {
  int num_kv_pages = 0;                 // <= 0: size the pool from free memory x gpu_memory_utilization
  int num_host_kv_pages = 0;            // the prefix cache's host tier, in pinned host memory (0: none)
  double gpu_memory_utilization = 0.9;  // share of the device's memory this process may use
  int max_num_batched_tokens = 8192;    // largest step (prefill chunk) the engine schedules: profiled
  int max_num_seqs = 256;               // largest decode batch: the top CUDA-graph bucket
  int64_t max_model_len = 0;            // 0: the model's max_position_embeddings
  bool cuda_graphs = true;              // --enforce-eager turns them off
  // "" : linear weights as the checkpoint stores them (MXFP8 stays FP8); "fp8": FP8 weights, quantised at
  // load from a bf16 checkpoint (or generated so with synthetic weights).
  std::string quantization;
  // K and V pages in FP8 (kernels.h KvPages: e4m3 with a scale per token and KV head; --kv-cache-dtype fp8):
  // about half the bytes per token (the bf16 index keys stay).
  bool kv_fp8 = false;
  int device = 0;  // CUDA device of this rank
  // Several ranks: this rank's shard, and the ranks (their host communicator carries NCCL's unique id).
  std::optional<ShardLayout> shard;
  std::shared_ptr<dist::Communicator> ranks;
  // The device collectives; null: NCCL over `ranks` (tests pass a host-staged one to run shards on one GPU).
  std::shared_ptr<dist::DeviceCommunicator> device_comm;
};

class CudaModel : public ModelBackend {
 public:
  // ckpt == nullptr: synthetic weights generated on the device (model/random_model.h scales, `random_seed`),
  // for speed work without a checkpoint on disk.
  CudaModel(ModelConfig config, const Checkpoint* ckpt, const CudaModelOptions& options,
            uint64_t random_seed = 0);
  ~CudaModel() override;

  const ModelConfig& config() const override { return config_; }
  const char* device_name() const override { return "cuda"; }
  int num_kv_pages() const override { return num_pages_; }
  int num_host_kv_pages() const override;
  bool samples_on_device() const override { return true; }
  int data_parallel_size() const override;
  std::vector<int64_t> expert_token_counts() const override;
  MemoryUse memory_use() const override;
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) override;
  // Benchmarks: fills every KV and index-key page with synthetic values (a long context without a prefill).
  void fill_kv_random(uint64_t seed);

  struct Impl;

 private:
  struct Graphs;
  ForwardOutput run(const ForwardBatch& batch, const ForwardOptions& options, bool profile);

  ModelConfig config_;
  int num_pages_ = 0;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace m3
