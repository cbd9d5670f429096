// Checkpoint discovery (single file or index.json shards), name canonicalisation and fp32 reads.
#include "loader/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& s, const char* p) {
  return s.rfind(p, 0) == 0;
}

std::vector<std::string> shard_files(const std::string& dir) {
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    std::ifstream in(index);
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ErrorKind::kCorruptData, index.string() + ": not a safetensors index (no weight_map object)");
    std::set<std::string> unique;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        fail(ErrorKind::kCorruptData, index.string() + ": weight_map['" + it.key() + "'] is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail(ErrorKind::kCorruptData, index.string() + ": shard name '" + f + "' must be a plain file name");
      unique.insert(f);
    }
    for (const auto& f : unique) {
      fs::path p = fs::path(dir) / f;
      if (!fs::exists(p))
        fail(ErrorKind::kNotFound, index.string() + " lists shard '" + f + "', which does not exist");
      files.push_back(p.string());
    }
    return files;
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) fail(ErrorKind::kNotFound, "no *.safetensors files in '" + dir + "'");
  return files;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The vision tower, projector and patch merger under "vision.": the released names
// (vision_tower.vision_model.*, multi_modal_projector.*, patch_merge_mlp.*) and those transformers'
// save_pretrained writes (a "model." prefix, the encoder MLP as block_sparse_moe.*, the merger as
// multi_modal_projector.merge_linear_*).
static std::string canonical_vision_name(std::string n) {
  if (starts_with(n, "model.")) n = n.substr(6);
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = n.find(from);
    if (at != std::string::npos) n = n.substr(0, at) + to + n.substr(at + from.size());
  };
  if (starts_with(n, "vision_tower.vision_model.")) {
    n = "vision.tower." + n.substr(26);
    replace(".block_sparse_moe.fc", ".mlp.fc");
    replace("embeddings.proj.", "embeddings.patch_embedding.");
    return n;
  }
  if (starts_with(n, "multi_modal_projector.merge_linear_")) return "vision.merge.linear_" + n.substr(35);
  if (starts_with(n, "multi_modal_projector.")) return "vision.projector." + n.substr(22);
  if (starts_with(n, "patch_merge_mlp.")) return "vision.merge." + n.substr(16);
  return "";
}

std::string Checkpoint::canonical_name(const std::string& n) {
  if (std::string v = canonical_vision_name(n); !v.empty()) return v;
  std::string c;
  if (starts_with(n, "language_model.model."))
    c = "model." + n.substr(21);
  else if (starts_with(n, "language_model.lm_head."))
    c = n.substr(15);
  else if (starts_with(n, "model.language_model."))
    c = "model." + n.substr(21);
  else if (starts_with(n, "model.") || starts_with(n, "lm_head."))
    c = n;
  else
    return "";  // anything else outside the text model
  if (starts_with(c, "model.mtp.") || starts_with(c, "mtp."))
    return "";  // MTP heads are not part of the main model
  return c;
}

Checkpoint::Checkpoint(const std::string& model_dir) : dir_(model_dir) {
  if (!fs::is_directory(model_dir))
    fail(ErrorKind::kNotFound, "model directory '" + model_dir + "' does not exist");
  for (const auto& path : shard_files(model_dir)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile* f = files_.back().get();
    for (const auto& [name, info] : f->tensors()) {
      std::string c = canonical_name(name);
      if (c.empty()) {
        ignored_.push_back(name);
        continue;
      }
      auto [it, inserted] = tensors_.emplace(c, TensorRef{f, &info});
      if (!inserted)
        fail(ErrorKind::kCorruptData, "tensor '" + name + "' appears twice (in " + it->second.file->path() +
                                          " and " + f->path() + ")");
    }
  }
}

bool Checkpoint::has(const std::string& name) const {
  return tensors_.count(name) > 0;
}

const TensorRef& Checkpoint::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail(ErrorKind::kNotFound, "checkpoint '" + dir_ + "' has no tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, ref] : tensors_) out.push_back(name);
  return out;
}

std::vector<float> Checkpoint::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                                        int quant_block, const TensorCut& cut) const {
  const TensorRef& ref = at(name);
  const TensorInfo& info = *ref.info;
  const std::string where = "tensor '" + info.name + "' in " + ref.file->path();
  if (info.shape != shape)
    fail(ErrorKind::kCorruptData,
         where + " has shape " + shape_string(info.shape) + ", expected " + shape_string(shape));
  if (!dtype_is_float(info.dtype))
    fail(ErrorKind::kCorruptData, where + " has dtype " + dtype_name(info.dtype) + ", expected a float type");
  // Viewed as [rows, cols]; the cut narrows one of the two ranges.
  const int64_t rows = shape.empty() ? 1 : shape[0], cols = rows ? info.numel() / rows : 0;
  int64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols;
  if (cut.dim >= 0) {
    const int64_t extent = cut.dim == 0 ? rows : cols;
    M3_CHECK(cut.dim <= 1 && (cut.dim == 0 || shape.size() == 2) && 0 <= cut.begin && cut.begin <= cut.end &&
                 cut.end <= extent,
             where + ": shard cut out of range");
    (cut.dim == 0 ? r0 : c0) = cut.begin;
    (cut.dim == 0 ? r1 : c1) = cut.end;
  }
  const int64_t width = c1 - c0;
  std::vector<float> out(static_cast<size_t>((r1 - r0) * width));
  const uint8_t* data = ref.file->tensor_data(info);
  const size_t esize = dtype_size(info.dtype);
  if (width == cols) {  // whole rows: one contiguous run
    convert_to_f32(info.dtype, data + r0 * cols * esize, out.size(), out.data());
  } else {
    for (int64_t r = r0; r < r1; ++r)
      convert_to_f32(info.dtype, data + (r * cols + c0) * esize, width, out.data() + (r - r0) * width);
  }
  if (info.dtype != DType::kF8E4M3) return out;

  // MXFP8: one e8m0 exponent per `quant_block` consecutive inputs of a row.
  const std::string scale_name = name + "_scale_inv";
  if (shape.size() != 2 || !has(scale_name))
    fail(ErrorKind::kCorruptData, where + " is fp8-e4m3 but has no 2-D companion '" + scale_name + "'");
  const TensorRef& sref = at(scale_name);
  const int64_t blocks = (cols + quant_block - 1) / quant_block;
  if (sref.info->dtype != DType::kU8 || sref.info->shape != std::vector<int64_t>{rows, blocks})
    fail(ErrorKind::kCorruptData, "tensor '" + sref.info->name + "' in " + sref.file->path() +
                                      " must be U8 " + shape_string({rows, blocks}) + ", got " +
                                      dtype_name(sref.info->dtype) + " " + shape_string(sref.info->shape));
  const uint8_t* scales = sref.file->tensor_data(*sref.info);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      out[(r - r0) * width + (c - c0)] *= e8m0_to_f32(scales[r * blocks + c / quant_block]);
  return out;
}

}  // namespace m3
