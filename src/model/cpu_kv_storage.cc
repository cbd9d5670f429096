// Allocation of the per-layer page arrays, and the KV writes (rounded to the cache's precision).
#include "model/cpu_kv_storage.h"

#include <algorithm>

#include "loader/dtype.h"
#include "loader/mxfp8.h"

namespace m3 {

CpuKvStorage::CpuKvStorage(const ModelConfig& c, int num_pages, int kv_heads, Precision precision)
    : num_pages_(num_pages),
      page_size_(c.msa.block_size),
      kv_stride_(static_cast<size_t>(kv_heads) * c.head_dim),
      idx_stride_(static_cast<size_t>(c.msa.index_head_dim)),
      head_dim_(c.head_dim),
      precision_(precision) {
  const size_t slots = static_cast<size_t>(num_pages) * page_size_;
  for (int l = 0; l < c.num_layers; ++l) {
    const size_t idx = c.sparse_attention[l] ? slots * idx_stride_ : 0;
    k_.emplace_back(new float[slots * kv_stride_]);
    v_.emplace_back(new float[slots * kv_stride_]);
    idx_.emplace_back(idx ? new float[idx] : nullptr);
    bytes_ += (2 * slots * kv_stride_ + idx) * sizeof(float);
  }
}

void CpuKvStorage::store(int layer, int32_t page, int slot, const float* k, const float* v) {
  float* kd = this->k(layer, page, slot);
  float* vd = this->v(layer, page, slot);
  std::copy_n(k, kv_stride_, kd);
  std::copy_n(v, kv_stride_, vd);
  if (precision_ == Precision::kBf16) {
    for (size_t i = 0; i < kv_stride_; ++i)
      kd[i] = bf16_to_f32(f32_to_bf16(kd[i])), vd[i] = bf16_to_f32(f32_to_bf16(vd[i]));
  } else if (precision_ == Precision::kFp8) {
    for (size_t h = 0; h < kv_stride_; h += size_t(head_dim_)) {
      round_trip_fp8_vector(kd + h, head_dim_);
      round_trip_fp8_vector(vd + h, head_dim_);
    }
  }
}

void CpuKvStorage::copy_page(int32_t page, CpuKvStorage& dst, int32_t dst_page) const {
  const size_t kv = size_t(page_size_) * kv_stride_, idx = size_t(page_size_) * idx_stride_;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::copy_n(&k_[l][page * kv], kv, &dst.k_[l][dst_page * kv]);
    std::copy_n(&v_[l][page * kv], kv, &dst.v_[l][dst_page * kv]);
    if (idx_[l]) std::copy_n(&idx_[l][page * idx], idx, &dst.idx_[l][dst_page * idx]);
  }
}

}  // namespace m3
