// Backend selection: cpu is always built; cuda when the build has nvcc and the machine a GPU.
#include "model/backend.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "common/log.h"
#include "dist/launch.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"
#include "model/ranked_backend.h"
#include "model/scripted_backend.h"
#include "model/vision_tower.h"
#ifdef M3_HAVE_CUDA
#include "kernels/device_info.h"
#include "model/cuda_model.h"
#include "model/cuda_vision.h"
#endif

namespace m3 {
namespace {

std::string cuda_devices_summary() {
#ifdef M3_HAVE_CUDA
  auto devices = cuda::list_devices();
  if (devices.empty()) return "no usable CUDA device (" + cuda::no_device_reason() + ")";
  std::string s = std::to_string(devices.size()) + " CUDA device(s):";
  for (const auto& d : devices)
    s += " [" + std::to_string(d.index) + "] " + d.name + " sm_" + std::to_string(d.major * 10 + d.minor);
  return s;
#else
  return "this binary was built without CUDA (no nvcc at build time)";
#endif
}

}  // namespace

size_t cpu_kv_bytes_per_page(const ModelConfig& c) {
  size_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l)
    bytes += size_t{static_cast<size_t>(c.msa.block_size)} *
             (2 * c.kv_size() + (c.sparse_attention[l] ? c.msa.index_head_dim : 0)) * sizeof(float);
  return bytes;
}

size_t cuda_kv_bytes_per_page(const ModelConfig& c, int kv_heads, bool fp8) {
  const size_t kv = size_t(kv_heads) * c.head_dim;  // K or V values per slot
  const size_t kv_bytes = fp8 ? 2 * (kv + size_t(kv_heads) * 4) : 2 * kv * 2;
  size_t bytes = 0;
  for (int l = 0; l < c.num_layers; ++l)
    bytes += size_t(c.msa.block_size) * (kv_bytes + (c.sparse_attention[l] ? c.msa.index_head_dim * 2 : 0));
  return bytes;
}

size_t kv_bytes_per_page(const ModelConfig& c, const std::string& device, const std::string& kv) {
  if (device != "cuda") return cpu_kv_bytes_per_page(c);
  return cuda_kv_bytes_per_page(c, c.num_kv_heads, kv == "fp8" || kv == "fp8_e4m3");
}

std::string resolve_device(const std::string& requested) {
  if (requested == "cpu" || requested == "cuda") return requested;
  if (requested != "auto")
    fail(ErrorKind::kInvalidArgument, "--device '" + requested + "' is not one of auto, cpu, cuda");
#ifdef M3_HAVE_CUDA
  if (!cuda::list_devices().empty()) return "cuda";
#endif
  log_info("--device auto: using cpu (", cuda_devices_summary(), ")");
  return "cpu";
}

std::vector<float> ModelBackend::encode_vision(const media::VisionPatches& patches) const {
  if (!vision_)
    fail(ErrorKind::kUnsupported, "this model has no vision tower: image and video inputs are not supported");
  // A video longer than segment_max_frames temporal patches attends in segments, each with its own temporal
  // positions from 0 (vision_grid): encoded one at a time they are the same, and the tower's scratch stays
  // the size of one segment.
  const int smax = config().vision.segment_max_frames;
  if (patches.t <= smax || patches.num_patches() <= 0) return vision_->encode(patches);  // it validates
  const size_t row = patches.values.size() / size_t(patches.num_patches());
  const size_t per_t = size_t(patches.h) * patches.w * row;
  std::vector<float> out;
  media::VisionPatches seg;
  seg.h = patches.h;
  seg.w = patches.w;
  for (int t0 = 0; t0 < patches.t; t0 += smax) {
    seg.t = std::min(smax, patches.t - t0);
    seg.values.assign(patches.values.begin() + ptrdiff_t(per_t * t0),
                      patches.values.begin() + ptrdiff_t(per_t * (t0 + seg.t)));
    const std::vector<float> f = vision_->encode(seg);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// The vision tower, for the engine's rank (rank 0; its first GPU with --device cuda); null when the model has
// none. Loaded before the text model so that, on a GPU, its weights and its scratch for the largest image
// the processor makes are allocated before the KV pool is sized from the memory left.
static std::shared_ptr<const VisionEncoder> load_vision(const std::string& model_dir,
                                                        const BackendOptions& o) {
  if (o.load_format == "dummy" || o.device == "scripted") return nullptr;
  const ModelConfig config = load_model_config(model_dir);
  if (!config.has_vision) return nullptr;
  const Checkpoint ckpt(model_dir);
  if (!ckpt.has("vision.tower.embeddings.patch_embedding.weight")) return nullptr;
  const VisionConfig& v = config.vision;
  log_info("vision tower: ", v.num_layers, " layers of width ", v.hidden_size, " (", o.device, ")");
#ifdef M3_HAVE_CUDA
  if (o.device == "cuda") {
    // The largest input is an image at the image processor's max_pixels or a video segment of
    // segment_max_frames temporal patches at the video processor's per-frame max_pixels.
    const int64_t patch_area = int64_t(v.patch_size) * v.patch_size;
    const int image_patches = int(media::ImageProcessorConfig{}.max_pixels / patch_area);
    const int frame_patches = int(media::video_processor_config().max_pixels / patch_area);
    return std::make_shared<CudaVisionTower>(ckpt, config,
                                             dist::rank_env().local_rank % int(cuda::list_devices().size()),
                                             std::max(image_patches, frame_patches * v.segment_max_frames));
  }
#endif
  return std::make_shared<VisionTower>(ckpt, config);
}

std::unique_ptr<ModelBackend> load_backend(const std::string& model_dir, const BackendOptions& options) {
  std::shared_ptr<const VisionEncoder> vision = load_vision(model_dir, options);
  std::unique_ptr<ModelBackend> b = options.comm && options.comm->size() > 1
                                        ? load_on_ranks(model_dir, options)
                                        : load_shard(model_dir, options);
  b->set_vision(std::move(vision));  // the other ranks get its features in the forward batches
  return b;
}

void validate_precision(const std::string& quantization, const std::string& kv_cache_dtype,
                        const ModelConfig& model) {
  if (!quantization.empty() && quantization != "fp8" && quantization != "mxfp8")
    fail(ErrorKind::kInvalidArgument, "--quantization '" + quantization + "' is not one of fp8, mxfp8");
  if (quantization == "mxfp8" && model.weight_quant != WeightQuant::kMxfp8)
    fail(ErrorKind::kInvalidArgument,
         "--quantization mxfp8 needs an MXFP8 checkpoint; this one is unquantized (use fp8 to quantise it at "
         "load)");
  const std::string& kv = kv_cache_dtype;
  if (kv != "auto" && kv != "bfloat16" && kv != "fp8" && kv != "fp8_e4m3")
    fail(ErrorKind::kInvalidArgument,
         "--kv-cache-dtype '" + kv + "' is not one of auto, bfloat16, fp8, fp8_e4m3");
}

std::unique_ptr<ModelBackend> load_shard(const std::string& model_dir, const BackendOptions& options) {
  ModelConfig config = load_model_config(model_dir);
  std::shared_ptr<dist::Communicator> comm = options.comm ? options.comm : dist::local_communicator();
  const bool expert_parallel = options.expert_parallel && comm->size() > 1;
  if (!options.expert_placement.empty()) {
    std::vector<int32_t> sorted = options.expert_placement, every(config.num_experts);
    std::sort(sorted.begin(), sorted.end());
    std::iota(every.begin(), every.end(), 0);
    if (sorted != every)
      fail(ErrorKind::kInvalidArgument, "--expert-placement: not an order of the model's " +
                                            std::to_string(config.num_experts) + " experts");
    config.expert_placement = options.expert_placement;
  }
  if (options.data_parallel > 1 && (!options.expert_parallel || options.data_parallel != comm->size()))
    fail(ErrorKind::kUnsupported,
         "--data-parallel-size " + std::to_string(options.data_parallel) +
             " runs data-parallel attention with expert parallelism over all the "
             "ranks: it needs --enable-expert-parallel and --tensor-parallel-size 1");
  const ShardLayout shard = options.data_parallel > 1
                                ? make_dep_shard_layout(config, options.data_parallel, comm->rank())
                                : make_shard_layout(config, comm->size(), comm->rank(), expert_parallel);
  if (comm->size() > 1 && options.device != "cpu" && options.device != "cuda")
    fail(ErrorKind::kUnsupported, "--tensor-parallel-size " + std::to_string(comm->size()) + " on --device " +
                                      options.device + ": ranks run the cpu or cuda backend");
  if (options.load_format != "auto" && options.load_format != "safetensors" && options.load_format != "dummy")
    fail(ErrorKind::kInvalidArgument,
         "--load-format '" + options.load_format + "' is not one of auto, safetensors, dummy");
  const bool dummy = options.load_format == "dummy";
  validate_precision(options.quantization, options.kv_cache_dtype, config);
  // FP8 asked of a bf16 checkpoint: quantised at load; an MXFP8 checkpoint already is.
  const bool quantize = options.quantization == "fp8" && config.weight_quant == WeightQuant::kNone;
  const std::string& kv = options.kv_cache_dtype;
  const bool kv_fp8 = kv == "fp8" || kv == "fp8_e4m3";
  if (dummy && options.device != "cuda")
    fail(ErrorKind::kInvalidArgument, "--load-format dummy (random weights) needs --device cuda");
  if (options.device == "cuda") {
#ifdef M3_HAVE_CUDA
    if (cuda::list_devices().empty())
      fail(ErrorKind::kUnavailable, "--device cuda: " + cuda_devices_summary());
    CudaModelOptions co;
    co.num_kv_pages = options.num_kv_pages;
    co.num_host_kv_pages = options.num_host_kv_pages;
    co.gpu_memory_utilization = options.gpu_memory_utilization;
    co.max_num_batched_tokens = options.max_num_batched_tokens;
    co.max_num_seqs = options.max_num_seqs;
    co.max_model_len = options.max_model_len;
    co.cuda_graphs = !options.enforce_eager;
    co.quantization = quantize ? "fp8" : "";
    co.kv_fp8 = kv_fp8;
    if (comm->size() > 1) {  // one GPU per rank: the rank's index among the ranks of its machine
      co.shard = shard;
      co.ranks = comm;
      co.device = dist::rank_env().local_rank % static_cast<int>(cuda::list_devices().size());
    }
    try {
      if (dummy) {
        log_info("--load-format dummy: random weights generated on the device (speed measurement only)");
        return std::make_unique<CudaModel>(std::move(config), nullptr, co);
      }
      Checkpoint ckpt(model_dir);
      return std::make_unique<CudaModel>(std::move(config), &ckpt, co);
    } catch (const Error& e) {  // with several ranks, say which GPU (the rank and host come with the report)
      if (comm->size() == 1) throw;
      throw Error(e.kind(), "GPU " + std::to_string(co.device) + ": " + e.what());
    }
#else
    fail(ErrorKind::kUnsupported, "--device cuda: " + cuda_devices_summary());
#endif
  }
  if (options.num_kv_pages <= 0) fail(ErrorKind::kInvalidArgument, "the KV cache needs at least one page");
  if (options.device == "cpu") {
    Checkpoint ckpt(model_dir);
    CpuWeights weights = load_cpu_weights(config, ckpt, shard, quantize);
    using P = CpuKvStorage::Precision;
    return std::make_unique<CpuModel>(std::move(config), std::move(weights), options.num_kv_pages, shard,
                                      std::move(comm),
                                      kv_fp8             ? P::kFp8
                                      : kv == "bfloat16" ? P::kBf16
                                                         : P::kF32,
                                      options.num_host_kv_pages);
  }
  if (options.device == "scripted")  // testing: scripted outputs, no weights
    return std::make_unique<ScriptedBackend>(model_dir, options.script, options.num_kv_pages,
                                             options.num_host_kv_pages);
  fail(ErrorKind::kInvalidArgument, "--device '" + options.device + "' is not one of cpu, cuda");
}

}  // namespace m3
