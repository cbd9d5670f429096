// The vision path on the GPU (the same math as model/vision_tower.h, the CPU reference it is tested against):
// bf16 weights and GEMM inputs with fp32 accumulation (cuBLAS), fp32 residual stream, LayerNorms, the 3D RoPE
// and the softmax in fp32 (kernels/vision.h), attention per segment as two strided-batched GEMMs over the
// heads. It owns its weights, cuBLAS handle, stream and scratch on one device; encode() is serialised.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "config/model_config.h"
#include "loader/checkpoint.h"
#include "model/vision_tower.h"

namespace m3 {

class CudaVisionTower : public VisionEncoder {
 public:
  // reserve_patches: the scratch of an image that large is allocated now (by encoding a blank one), so that
  // it is in place before the KV pool takes the rest of the GPU; 0: grown on first use.
  CudaVisionTower(const Checkpoint& ckpt, const ModelConfig& config, int device, int reserve_patches = 0);
  ~CudaVisionTower() override;
  std::vector<float> encode(const media::VisionPatches& patches) const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
};

}  // namespace m3
