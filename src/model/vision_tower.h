// The vision path on the CPU, the reference (spec/model.md section 4): patch embedding (the Conv3d as a
// linear over a patch's channels x temporal x patch x patch values), pre-LayerNorm, CLIP-style encoder layers
// with bidirectional attention inside each image (or video segment of at most segment_max_frames temporal
// patches) and 3D RoPE on the first 3 x rope_axis_dim dims of every q / k head (NeoX rotate-half, angles [t *
// w_0..n | h * w_0..n | w * w_0..n], w_j = theta^(-2j / rope_axis_dim), computed in fp32), the projector
// (Linear -> GELU -> Linear on every patch) and the patch merger (each run of merge^2 consecutive projected
// patches concatenated -> Linear -> GELU -> Linear). fp32 math on the checkpoint's weights (exact-erf GELU).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "loader/checkpoint.h"
#include "media/image_preprocess.h"

namespace m3 {

// The 3D RoPE angles of one patch at (temporal index within its segment, patch row, patch column):
// rope_axis_dim() / 2 = n frequencies per axis, [t * w_0..n-1 | row * w_0..n-1 | col * w_0..n-1] (3n values),
// w_j = 1 / theta^(2j / rope_axis_dim) and the products in fp32 as the reference (torch, fp32) computes them.
std::vector<float> vision_rope_angles(const VisionConfig& vc, int t, int row, int col);

// Rotates one q or k head in place (NeoX rotate-half over the first 2 * num_angles dims): for i < num_angles,
// (x[i], x[i + num_angles]) -> (x[i] cos_i - x[i + num_angles] sin_i, x[i + num_angles] cos_i + x[i] sin_i).
// The remaining dims of the head are left alone.
void apply_vision_rope(float* head, const float* cos, const float* sin, int num_angles);

// The vision path's tensors as the release names and shapes them (spec/model.md 2.3), for writers of
// checkpoints (m3 make-random-model); LayerNorm weights are the entries ending in "norm*.weight" /
// "layrnorm.weight".
struct VisionTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<VisionTensor> released_vision_tensors(const ModelConfig& config);

// A validated grid: its attention segments (rows [seg[s], seg[s + 1]) attend to each other only) and the
// cos / sin of every patch's RoPE angles ([patches][num_angles], num_angles = 3 * rope_axis_dim / 2). Throws
// kInvalidArgument for a grid the config cannot take (patch width, h or w not a multiple of the merge size).
struct VisionGrid {
  int64_t n = 0;
  std::vector<int64_t> seg;
  int num_angles = 0;
  std::vector<float> cos, sin;
};
VisionGrid vision_grid(const VisionConfig& config, const media::VisionPatches& patches);

// What turns an image's (or video's) patches into the features of its placeholder tokens: the CPU reference
// below, or the CUDA one (model/cuda_vision.h).
class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // [patches / merge^2][text hidden] features, in placeholder order.
  virtual std::vector<float> encode(const media::VisionPatches& patches) const = 0;
};

class VisionTower : public VisionEncoder {
 public:
  // Reads vision.tower.*, vision.projector.* and vision.merge.* (loader/checkpoint.h's canonical names) with
  // the shapes `config.vision` implies. Throws kNotFound / kCorruptData naming a missing or misshapen tensor.
  VisionTower(const Checkpoint& ckpt, const ModelConfig& config);

  // [patches / merge^2][text hidden] features for the image or video's placeholder tokens, in order.
  // Throws kInvalidArgument when the grid does not fit the config (patch width, h or w not a multiple of
  // merge).
  std::vector<float> encode(const media::VisionPatches& patches) const override;

  // The encoder's output before the projector ([patches][vision hidden]), for tests against the reference.
  std::vector<float> encode_tower(const media::VisionPatches& patches) const;

  const VisionConfig& config() const { return vc_; }
  int output_width() const { return text_hidden_; }

 private:
  struct Linear {
    std::vector<float> w, b;  // [out][in], [out]
    int in = 0, out = 0;
  };
  struct LayerNorm {
    std::vector<float> w, b;
  };
  struct Layer {
    LayerNorm ln1, ln2;
    Linear q, k, v, o, fc1, fc2;
  };

  void encoder_layer(const Layer& layer, const VisionGrid& grid, std::vector<float>& x) const;
  void attention(const VisionGrid& grid, std::vector<float>& q, std::vector<float>& k,
                 const std::vector<float>& v, std::vector<float>& out) const;

  VisionConfig vc_;
  int text_hidden_ = 0;
  std::vector<float> patch_embed_;  // [hidden][patch_dim]
  LayerNorm pre_norm_;
  std::vector<Layer> layers_;
  Linear proj1_, proj2_, merge1_, merge2_;
};

}  // namespace m3
