// The CUDA backend's half of the prefix cache's host tier (kv/host_tier.h keeps the books): pinned, mapped
// host memory mirroring every KV page array, and the copies between it and the device pool. The copies of a
// step run on a high-priority side stream, one launch per layer, each followed by an event; enqueue_step
// makes layer l wait for its own copies only, so restoring a long prefix overlaps the layers before it.
#include <cuda_runtime.h>

#include <set>

#include "common/error.h"
#include "common/log.h"
#include "model/cuda_model_impl.h"

namespace m3 {

std::vector<std::pair<char*, size_t>> CudaModel::Impl::kv_arrays(int l) const {
  const Layer& L = layers[size_t(l)];
  const size_t P = size_t(c.msa.block_size), kv = size_t(kv_size());
  std::vector<std::pair<char*, size_t>> a;
  if (opt.kv_fp8) {
    a = {{reinterpret_cast<char*>(L.k8), P * kv},
         {reinterpret_cast<char*>(L.v8), P * kv},
         {reinterpret_cast<char*>(L.k_scale), P * hkv * 4},
         {reinterpret_cast<char*>(L.v_scale), P * hkv * 4}};
  } else {
    a = {{reinterpret_cast<char*>(L.k_cache), P * kv * 2}, {reinterpret_cast<char*>(L.v_cache), P * kv * 2}};
  }
  if (L.idx_cache) a.push_back({reinterpret_cast<char*>(L.idx_cache), P * c.msa.index_head_dim * 2});
  return a;
}

void CudaModel::Impl::allocate_host_tier(int slots) {
  free_host_tier();
  if (slots <= 0) return;
  size_t bytes = 0;
  host.arrays.resize(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l)
    for (const auto& [dev, page] : kv_arrays(l)) {
      void* p = nullptr;
      if (cudaHostAlloc(&p, size_t(slots) * page, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
        fail(ErrorKind::kUnavailable, "--kv-offloading-size: cannot pin " +
                                          std::to_string(size_t(slots) * kv_bytes_per_page() >> 20) +
                                          " MiB of host memory for the KV host tier");
      host.owned.push_back(p);
      host.arrays[size_t(l)].push_back(static_cast<char*>(p));
      bytes += size_t(slots) * page;
    }
  host.slots = slots;
  int least = 0, greatest = 0;
  M3_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  M3_CUDA_CHECK(cudaStreamCreateWithPriority(&host.stream, cudaStreamNonBlocking, greatest));
  M3_CUDA_CHECK(cudaEventCreateWithFlags(&host.start, cudaEventDisableTiming));
  host.layer_done.resize(size_t(c.num_layers));
  for (cudaEvent_t& e : host.layer_done) M3_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  log_info("cuda: KV host tier ", slots, " pages (", double(bytes) / 1e9, " GB of pinned host memory)");
}

void CudaModel::Impl::free_host_tier() {
  if (host.stream) cudaStreamSynchronize(host.stream);
  for (void* p : host.owned) cudaFreeHost(p);
  for (cudaEvent_t e : host.layer_done) cudaEventDestroy(e);
  if (host.start) cudaEventDestroy(host.start);
  if (host.stream) cudaStreamDestroy(host.stream);
  host = HostTier{};
}

void CudaModel::Impl::enqueue_page_copies(const std::vector<KvPageCopy>& copies, int num_pages) {
  host.pending = false;
  if (copies.empty()) return;
  for (const KvPageCopy& cp : copies)
    if (cp.page < 0 || cp.page >= num_pages || cp.host_slot < 0 || cp.host_slot >= host.slots)
      fail(ErrorKind::kInternal, "a page copy names an invalid page or host slot");
  // Waves: runs of copies that touch no page or slot twice, so a launch's blocks may take them in any order;
  // the waves of a layer run one after the other (a page spilled, then reused for a restore, in one step).
  std::vector<size_t> waves{0};
  {
    std::set<int32_t> pages, slots;
    for (size_t i = 0; i < copies.size(); ++i) {
      if (pages.count(copies[i].page) || slots.count(copies[i].host_slot)) {
        waves.push_back(i);
        pages.clear();
        slots.clear();
      }
      pages.insert(copies[i].page);
      slots.insert(copies[i].host_slot);
    }
    waves.push_back(copies.size());
  }
  std::vector<cuda::PageCopyItem> items;
  std::vector<size_t> launch_end;  // [layer][wave] flattened: end of each launch's items
  for (int l = 0; l < c.num_layers; ++l) {
    const auto arrays = kv_arrays(l);
    for (size_t w = 0; w + 1 < waves.size(); ++w) {
      for (size_t i = waves[w]; i < waves[w + 1]; ++i)
        for (size_t a = 0; a < arrays.size(); ++a) {
          const KvPageCopy& cp = copies[i];
          char* dev = arrays[a].first + size_t(cp.page) * arrays[a].second;
          char* hst = host.arrays[size_t(l)][a] + size_t(cp.host_slot) * arrays[a].second;
          items.push_back(cp.to_host ? cuda::PageCopyItem{dev, hst, arrays[a].second}
                                     : cuda::PageCopyItem{hst, dev, arrays[a].second});
        }
      launch_end.push_back(items.size());
    }
  }
  const cuda::PageCopyItem* d_items = to_device("host_tier.items", items);
  // The side stream starts once the item table is on the device (and the previous step is done with pages).
  M3_CUDA_CHECK(cudaEventRecord(host.start, stream));
  M3_CUDA_CHECK(cudaStreamWaitEvent(host.stream, host.start, 0));
  const size_t per_layer = waves.size() - 1;
  for (int l = 0; l < c.num_layers; ++l) {
    for (size_t w = 0; w < per_layer; ++w) {
      const size_t k = size_t(l) * per_layer + w, begin = k ? launch_end[k - 1] : 0;
      cuda::copy_pages(d_items + begin, static_cast<int>(launch_end[k] - begin), host.stream);
    }
    M3_CUDA_CHECK(cudaEventRecord(host.layer_done[size_t(l)], host.stream));
  }
  host.pending = true;
}

}  // namespace m3
