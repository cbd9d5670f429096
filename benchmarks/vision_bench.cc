// The CUDA vision tower at the released widths (32 layers of 1280, 16 heads x 80, projector and merger to
// 6144) on random weights: one image of 224 x 224, 448 x 448 and 672 x 672 (the processor's largest, 2,304
// patches) and one video attention segment (8 frames) at 448 px and at the video processor's largest frames,
// timed end to end as the server runs it (host patches in, features out), against the bf16
// tensor-core floor of its FLOPs and the HBM floor of its weights.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "common/random_init.h"
#include "harness.h"
#include "loader/checkpoint.h"
#include "loader/dtype.h"
#include "loader/safetensors_writer.h"
#include "model/cuda_vision.h"

namespace m3::bench {
namespace {

// A vision-only checkpoint of random bf16 weights at the config's widths, in the release's names.
std::string write_random_vision(const ModelConfig& c) {
  const std::string dir = (std::filesystem::temp_directory_path() / "m3-vision-bench").string();
  std::filesystem::create_directories(dir);
  SafetensorsWriter w;
  uint64_t key = 1;
  for (const VisionTensor& t : released_vision_tensors(c)) {
    int64_t in = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) in *= t.shape[d];
    const bool norm = t.name.find("norm") != std::string::npos;
    const float offset = norm && t.name.find(".weight") != std::string::npos ? 1.0f : 0.0f;
    const float scale = t.shape.size() == 1 ? 0.02f : 1.0f / std::sqrt(float(in));
    const uint64_t k = (key++) << 40;
    w.add(t.name, DType::kBF16, t.shape, [k, scale, offset](uint8_t* dst, int64_t first, int64_t count) {
      for (int64_t i = 0; i < count; ++i)
        reinterpret_cast<uint16_t*>(dst)[i] =
            f32_to_bf16(offset + counter_gaussian(k + uint64_t(first + i)) * scale);
    });
  }
  w.write(dir + "/model.safetensors");
  return dir;
}

M3_BENCH(vision) {
  ModelConfig c;
  c.hidden_size = 6144;
  c.has_vision = true;  // VisionConfig's defaults are the released vision_config
  if (!wanted(opts, "vision_encode", "")) return;
  const std::string dir = write_random_vision(c);
  const CudaVisionTower tower(Checkpoint(dir), c, 0);
  const VisionConfig& v = c.vision;
  double weight_bytes = 0;
  for (const VisionTensor& t : released_vision_tensors(c)) {
    double n = 2;
    for (int64_t d : t.shape) n *= double(d);
    weight_bytes += n;
  }
  // Images at 224, 448 and 672 px (the image processor's largest), and a video segment of 4 temporal patches
  // (8 frames) at 448 px and at 784 x 756 (within the video processor's 768 x 28 x 28 per frame).
  struct Case {
    int t, height, width;
    const char* unit;
  };
  for (const Case& k : {Case{1, 224, 224, "images"}, Case{1, 448, 448, "images"}, Case{1, 672, 672, "images"},
                        Case{4, 448, 448, "segments"}, Case{4, 756, 784, "segments"}}) {
    const std::string shape = (k.t > 1 ? std::to_string(2 * k.t) + " frames " : std::string()) +
                              std::to_string(k.width) + "x" + std::to_string(k.height);
    if (!wanted(opts, "vision_encode", shape)) continue;
    media::VisionPatches p;
    p.t = k.t, p.h = k.height / 14, p.w = k.width / 14;
    p.values.resize(size_t(p.num_patches()) * v.patch_dim());
    for (size_t i = 0; i < p.values.size(); ++i)
      p.values[i] = float(int(i * 2654435761u % 2001) - 1000) / 600.0f;
    const double n = double(p.num_patches()), hv = v.hidden_size, I = v.intermediate_size;
    const double pr = v.projector_hidden_size, h = c.hidden_size;
    const double flops = 2 * n * v.patch_dim() * hv +
                         v.num_layers * (2 * n * (4 * hv * hv + 2 * hv * I) + 4 * n * n * hv) +
                         2 * n * (hv * pr + pr * h) + 2 * (n / 4) * (4 * h * pr + pr * h);
    tower.encode(p);  // warm-up: scratch sized, cuBLAS plans made
    std::vector<double> times;
    for (int i = 0; i < std::max(3, opts.iters / 4); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      tower.encode(p);
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double us = times[times.size() / 2];
    report({"vision_encode", shape + " (" + std::to_string(int(n)) + " patches)", us, weight_bytes, flops,
            std::to_string(1e6 / us).substr(0, 6) + " " + k.unit + "/s, host patches in, features out"});
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace m3::bench
