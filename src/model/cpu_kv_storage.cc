// Allocation of the per-layer page arrays.
#include "model/cpu_kv_storage.h"

namespace m3 {

CpuKvStorage::CpuKvStorage(const ModelConfig& c, int num_pages, int kv_heads)
    : num_pages_(num_pages),
      page_size_(c.msa.block_size),
      kv_stride_(static_cast<size_t>(kv_heads) * c.head_dim),
      idx_stride_(static_cast<size_t>(c.msa.index_head_dim)) {
  const size_t slots = static_cast<size_t>(num_pages) * page_size_;
  for (int l = 0; l < c.num_layers; ++l) {
    const size_t idx = c.sparse_attention[l] ? slots * idx_stride_ : 0;
    k_.emplace_back(new float[slots * kv_stride_]);
    v_.emplace_back(new float[slots * kv_stride_]);
    idx_.emplace_back(idx ? new float[idx] : nullptr);
    bytes_ += (2 * slots * kv_stride_ + idx) * sizeof(float);
  }
}

}  // namespace m3
