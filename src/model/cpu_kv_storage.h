// Paged fp32 KV storage of the CPU backend. One page holds page_size consecutive positions of one sequence:
// per layer K and V as [page][slot][kv_head][head_dim] (the rank's KV heads), and for MSA layers the index
// keys (post-norm, post-RoPE) as [page][slot][index_dim], allocated with the same page ids.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/model_config.h"

namespace m3 {

class CpuKvStorage {
 public:
  // What K and V hold: fp32 (exact), the values of a bf16 cache (what the CUDA backend stores), or of an FP8
  // cache (loader/mxfp8.h round_trip_fp8_vector per token and head). Index keys stay exact.
  enum class Precision { kF32, kBf16, kFp8 };
  // Pages of `kv_heads` KV heads each (a tensor-parallel rank holds its own heads).
  CpuKvStorage(const ModelConfig& config, int num_pages, int kv_heads, Precision precision = Precision::kF32);
  int num_pages() const { return num_pages_; }
  int page_size() const { return page_size_; }

  float* k(int layer, int32_t page, int slot) { return &k_[layer][offset(page, slot, kv_stride_)]; }
  float* v(int layer, int32_t page, int slot) { return &v_[layer][offset(page, slot, kv_stride_)]; }
  float* index_k(int layer, int32_t page, int slot) { return &idx_[layer][offset(page, slot, idx_stride_)]; }
  // Writes one token's K and V (all of the rank's heads) to its slot, in the cache's precision.
  void store(int layer, int32_t page, int slot, const float* k, const float* v);
  // Copies page `page` (K, V and index keys of every layer) to page `dst_page` of `dst`, a storage of the
  // same model, heads and precision (the prefix cache's host tier).
  void copy_page(int32_t page, CpuKvStorage& dst, int32_t dst_page) const;
  Precision precision() const { return precision_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t offset(int32_t page, int slot, size_t stride) const {
    return (static_cast<size_t>(page) * page_size_ + slot) * stride;
  }
  int num_pages_, page_size_;
  size_t kv_stride_, idx_stride_;
  int head_dim_;
  Precision precision_;
  // Left uninitialised: a slot is always written before any token reads it, and untouched pages of a large
  // pool then cost no memory or start-up time.
  std::vector<std::unique_ptr<float[]>> k_, v_, idx_;
  size_t bytes_ = 0;
};

}  // namespace m3
