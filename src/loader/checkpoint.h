// A Hugging Face checkpoint directory: one model.safetensors or shards listed by
// model.safetensors.index.json. Tensor names are canonicalised to the text model's names
// ("model.layers.N....", "lm_head.weight") whatever the layout (released VL wrapper "language_model.model.*",
// text-only "model.*"); vision-tower, projector and MTP tensors are set aside (this engine serves text).
// Reads convert any float dtype to fp32 and dequantise MXFP8 (fp8-e4m3 weight x 2^(e8m0 scale - 127) per
// block of inputs).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace m3 {

struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
};

// The part of a 2-D tensor [rows, cols] one tensor-parallel rank reads: rows [begin, end) (dim 0), columns
// [begin, end) (dim 1), or all of it (dim -1). Only the bytes of the part are touched (the files are
// mmapped).
struct TensorCut {
  int dim = -1;
  int64_t begin = 0, end = 0;
};

class Checkpoint {
 public:
  explicit Checkpoint(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const;
  const TensorRef& at(const std::string& name) const;  // throws kNotFound naming the tensor
  std::vector<std::string> names() const;              // canonical tensor names, sorted
  size_t num_ignored() const { return ignored_.size(); }
  size_t num_files() const { return files_.size(); }

  // Reads tensor `name` (or the `cut` of it) as fp32, checking its full shape. A fp8-e4m3 tensor "X.weight"
  // is dequantised with "X.weight_scale_inv" ([rows, cols / quant_block] e8m0). Errors name the tensor and
  // its file.
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& shape,
                              int quant_block = 32, const TensorCut& cut = {}) const;

  // Canonical name of a stored tensor name ("model.*" / "lm_head.*" for the text model, "vision.tower.*",
  // "vision.projector.*" and "vision.merge.*" for the vision path), or "" for tensors no model part uses
  // (MTP).
  static std::string canonical_name(const std::string& stored);

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef> tensors_;  // canonical name -> location
  std::vector<std::string> ignored_;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace m3
