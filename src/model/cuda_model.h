// The CUDA backend: the same forward pass as the CPU reference on the GPU. BF16 weights and KV pages, fp32
// residual stream and accumulation, cuBLAS GEMMs, kernels from src/kernels. Correct first: the MoE reads the
// routing back to the host to group tokens by expert (one sync per MoE layer), and attention is a
// straightforward per-head kernel; the performance work replaces both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "model/backend.h"

namespace m3 {

class CudaModel : public ModelBackend {
 public:
  // num_kv_pages <= 0: size the KV pool from the free device memory x gpu_memory_utilization.
  CudaModel(ModelConfig config, const Checkpoint& ckpt, int num_kv_pages, double gpu_memory_utilization);
  ~CudaModel() override;

  const ModelConfig& config() const override { return config_; }
  const char* device_name() const override { return "cuda"; }
  int num_kv_pages() const override { return num_pages_; }
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) override;

  struct Impl;

 private:
  ModelConfig config_;
  int num_pages_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace m3
