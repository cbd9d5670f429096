// Backend selection: cpu is always built; cuda is reported as unavailable until the CUDA backend lands.
#include "model/backend.h"

#include "common/error.h"
#include "loader/checkpoint.h"
#include "model/cpu_model.h"

namespace m3 {

std::unique_ptr<ModelBackend> load_backend(const std::string& model_dir, const BackendOptions& options) {
  ModelConfig config = load_model_config(model_dir);
  if (options.num_kv_pages <= 0) fail(ErrorKind::kInvalidArgument, "the KV cache needs at least one page");
  if (options.device == "cpu") {
    Checkpoint ckpt(model_dir);
    CpuWeights weights = load_cpu_weights(config, ckpt);
    return std::make_unique<CpuModel>(std::move(config), std::move(weights), options.num_kv_pages);
  }
  if (options.device == "cuda")
    fail(ErrorKind::kUnsupported,
         "--device cuda: the CUDA backend is not part of this build yet; use --device cpu");
  fail(ErrorKind::kInvalidArgument, "--device '" + options.device + "' is not one of cpu, cuda");
}

}  // namespace m3
