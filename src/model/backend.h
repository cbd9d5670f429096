// The interface every model backend (cpu, cuda) implements; the engine drives it and nothing else.
#pragma once

#include <memory>
#include <string>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "media/image_preprocess.h"
#include "model/forward_batch.h"

namespace m3 {

class VisionEncoder;

// Host or device bytes a backend holds for the model (its shard, with several ranks).
struct MemoryUse {
  size_t weights = 0, kv = 0;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const char* device_name() const = 0;
  int page_size() const { return config().msa.block_size; }  // KV page = MSA block
  virtual int num_kv_pages() const = 0;
  // Host slots of the prefix cache's host tier (each holds one page); 0 when there is none.
  virtual int num_host_kv_pages() const { return 0; }
  // Runs the batch: first its page copies (in order), then the forward pass, whose new tokens' KV (and
  // index-K) are written to their pages first.
  virtual ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options = {}) = 0;
  // True when forward() honours ForwardBatch::sampling: it samples on its device and returns
  // ForwardOutput::sampled.
  virtual bool samples_on_device() const { return false; }
  virtual MemoryUse memory_use() const { return {}; }
  // Data-parallel attention ranks (config/shard_layout.h): each attends for its own sequences with its own
  // pool of num_kv_pages() pages; ForwardBatch seqs are grouped by SeqChunk::dp_rank.
  virtual int data_parallel_size() const { return 1; }
  // Tokens routed to each routed expert so far, summed over the MoE layers (the load that expert placement
  // balances); empty when the backend does not count.
  virtual std::vector<int64_t> expert_token_counts() const { return {}; }

  // The vision path (model/vision_tower.h), when the checkpoint has one: the features of an image's or
  // video's placeholder tokens, [tokens][hidden_size], which the engine hands back in
  // ForwardBatch::embed_values. Only the backend the engine drives holds it (rank 0's); the other ranks
  // receive the features in the batch.
  bool has_vision() const { return vision_ != nullptr; }
  std::vector<float> encode_vision(const media::VisionPatches& patches) const;  // kUnsupported without one
  void set_vision(std::shared_ptr<const VisionEncoder> tower) { vision_ = std::move(tower); }

 private:
  std::shared_ptr<const VisionEncoder> vision_;
};

struct BackendOptions {
  std::string device = "cpu";  // cpu | cuda | scripted (testing: see model/scripted_backend.h)
  int num_kv_pages = 0;        // KV pages to allocate (page = config.msa.block_size tokens); cuda: 0 = auto
  int num_host_kv_pages = 0;   // host-memory slots of the prefix cache's host tier (--kv-offloading-size)
  double gpu_memory_utilization = 0.9;  // cuda: share of device memory for weights + KV when sizing the pool
  int max_num_batched_tokens = 8192;    // cuda: the largest step, profiled by the memory plan
  int max_num_seqs = 256;               // cuda: the largest decode batch (top CUDA-graph bucket)
  int64_t max_model_len = 0;            // cuda: 0 = the model's
  bool enforce_eager = false;           // cuda: no CUDA graphs
  std::string load_format = "auto";     // auto | safetensors | dummy (cuda: random weights, no checkpoint)
  // Linear-layer weights: "" as the checkpoint stores them (an MXFP8 checkpoint stays FP8 on the GPU); "fp8":
  // FP8 (MXFP8 blocks of 32) for a bf16 checkpoint too, quantised at load (loader/mxfp8.h); "mxfp8": the
  // checkpoint's own MXFP8 (an error for any other checkpoint).
  std::string quantization;
  // KV cache precision: auto (CUDA bf16, CPU fp32) | bfloat16 | fp8 / fp8_e4m3 (K and V in e4m3 with a
  // per-token, per-head scale; the CPU backend so far).
  std::string kv_cache_dtype = "auto";
  std::string script;  // device "scripted": the response script (JSON)
  // Routed experts split over the ranks by expert rather than by column (--enable-expert-parallel).
  bool expert_parallel = false;
  // Data-parallel attention with expert parallelism (DEP, --data-parallel-size): every rank of `comm` is a DP
  // rank (tensor parallel 1) with its own sequences and KV pool; needs expert_parallel. 1: tensor parallel.
  int data_parallel = 1;
  // Static expert placement (config/expert_placement.h, --expert-placement): slot s holds checkpoint expert
  // expert_placement[s]; empty: none.
  std::vector<int32_t> expert_placement;
  // The ranks the model is split over (tensor parallel; config/shard_layout.h). Null: one rank.
  std::shared_ptr<dist::Communicator> comm;
};

// Bytes one KV page takes on the CPU backend (K, V and, for MSA layers, index keys, over all layers).
size_t cpu_kv_bytes_per_page(const ModelConfig& config);
// Bytes one KV page takes on the CUDA backend for `kv_heads` KV heads (a rank's, or the whole model's): bf16
// K and V, or e4m3 with an fp32 scale per KV head (fp8), and the bf16 MSA index keys.
size_t cuda_kv_bytes_per_page(const ModelConfig& config, int kv_heads, bool fp8);
// Bytes one KV page of the whole model (every rank's heads) takes on `device` (cpu | cuda | scripted) with
// that --kv-cache-dtype: what sizes the host tier from --kv-offloading-size.
size_t kv_bytes_per_page(const ModelConfig& config, const std::string& device,
                         const std::string& kv_cache_dtype);

// Checks --quantization and --kv-cache-dtype against the model (errors name the flag); load_backend calls it,
// and `m3 serve` before anything loads.
void validate_precision(const std::string& quantization, const std::string& kv_cache_dtype,
                        const ModelConfig& model);

// Maps --device (auto | cpu | cuda) to a backend name; auto picks cuda when it is built and a GPU is present.
std::string resolve_device(const std::string& requested);

// Loads the checkpoint in `model_dir` onto the requested device. Errors name the file / tensor / flag. With
// several ranks this runs on rank 0 and loads every rank (model/ranked_backend.h).
std::unique_ptr<ModelBackend> load_backend(const std::string& model_dir, const BackendOptions& options);

// This rank's shard alone (what load_backend and the worker ranks build on).
std::unique_ptr<ModelBackend> load_shard(const std::string& model_dir, const BackendOptions& options);

}  // namespace m3
