// Loading rejects checkpoints that do not match the config: a missing tensor, an unexpected one, a wrong
// shape. Each error names the tensor (and the file where it lives).
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <functional>

#include "common/error.h"
#include "loader/safetensors.h"
#include "support/model_fixtures.h"
#include "support/safetensors_writer.h"

namespace m3::testing {
namespace {
namespace fs = std::filesystem;

// Copies the single-file fixture m3-tiny-msa, letting `edit` change its tensor list.
std::string edited_copy(const std::string& tag, const std::function<void(std::vector<RawTensor>&)>& edit) {
  fs::path dir = fs::temp_directory_path() / ("m3_layout_" + tag + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixture_model_dir("m3-tiny-msa") + "/config.json", dir / "config.json");
  SafetensorsFile src(fixture_model_dir("m3-tiny-msa") + "/model.safetensors");
  std::vector<RawTensor> tensors;
  for (const auto& [name, info] : src.tensors()) {
    const char* p = reinterpret_cast<const char*>(src.tensor_data(info));
    tensors.push_back({name, dtype_name(info.dtype), info.shape, std::string(p, info.end - info.begin)});
  }
  edit(tensors);
  write_file((dir / "model.safetensors").string(), safetensors_bytes(tensors));
  return dir.string();
}

std::string load_error(const std::string& dir) {
  BackendOptions o;
  o.num_kv_pages = 4;
  try {
    load_backend(dir, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WeightLayout, MissingTensorIsNamed) {
  auto dir = edited_copy("missing", [](auto& t) {
    std::erase_if(t, [](const RawTensor& r) {
      return r.name == "language_model.model.layers.2.self_attn.index_k_proj.weight";
    });
  });
  EXPECT_NE(load_error(dir).find("model.layers.2.self_attn.index_k_proj.weight"), std::string::npos)
      << load_error(dir);
}

TEST(WeightLayout, UnexpectedTensorIsNamed) {
  auto dir = edited_copy("extra", [](auto& t) {
    t.push_back(
        {"language_model.model.layers.0.self_attn.index_q_proj.weight", "BF16", {2}, std::string(4, '\0')});
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("unexpected tensor 'language_model.model.layers.0.self_attn.index_q_proj.weight'"),
            std::string::npos)
      << err;
}

TEST(WeightLayout, WrongShapeIsNamed) {
  auto dir = edited_copy("shape", [](auto& t) {
    for (RawTensor& r : t)
      if (r.name == "language_model.model.norm.weight") {
        r.shape = {r.shape[0] / 2};
        r.bytes.resize(r.bytes.size() / 2);
      }
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("language_model.model.norm.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("expected [64]"), std::string::npos) << err;
}

TEST(WeightLayout, DenseMlpUnderEitherName) {
  // The release keeps dense MLPs under mlp.*, transformers writes block_sparse_moe.*_proj: both load, and the
  // forward pass is the same.
  auto renamed = edited_copy("alias", [](auto& t) {
    for (RawTensor& r : t)
      if (r.name.find("layers.0.mlp.") != std::string::npos)
        r.name.replace(r.name.find(".mlp."), 5, ".block_sparse_moe.");
  });
  BackendOptions o;
  o.num_kv_pages = 8;
  auto a = load_backend(fixture_model_dir("m3-tiny-msa"), o);
  auto b = load_backend(renamed, o);
  SequenceRunner ra(*a), rb(*b);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(ra.step({{ra.add_sequence(), prompt}}), rb.step({{rb.add_sequence(), prompt}}));
}

TEST(WeightLayout, LoadFormatIsCheckedAndNamed) {
  BackendOptions o;
  o.num_kv_pages = 4;
  o.load_format = "pt";
  try {
    load_backend(fixture_model_dir("m3-tiny-msa"), o);
    FAIL() << "an unknown --load-format must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--load-format 'pt'"), std::string::npos) << e.what();
  }
  o.load_format = "dummy";  // random weights exist only for the CUDA backend
  try {
    load_backend(fixture_model_dir("m3-tiny-msa"), o);
    FAIL() << "--load-format dummy on the CPU backend must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--load-format dummy"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace m3::testing
