// safetensors parsing, sharded checkpoints and MXFP8 dequantisation; every malformed file is a kCorruptData
// error naming the file (and the tensor where there is one), never a crash.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "loader/checkpoint.h"
#include "support/safetensors_writer.h"

namespace m3::testing {
namespace {
namespace fs = std::filesystem;

std::string header_error(const std::string& bytes) {
  try {
    parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    return e.what();
  }
  return "";
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("m3_loader_" + tag + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const RawTensor kA{"model.norm.weight", "F32", {2}, as_bytes(std::vector<float>{1.5f, -2.0f})};
const RawTensor kB{"lm_head.weight", "BF16", {1, 2}, as_bytes(std::vector<uint16_t>{0x3f80, 0xc040})};

TEST(Safetensors, ParsesValidHeader) {
  std::string bytes = safetensors_bytes({kA, kB});
  SafetensorsHeader h =
      parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors.at("lm_head.weight").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.tensors.at("lm_head.weight").dtype, DType::kBF16);
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

TEST(Safetensors, MalformedInputsAreNamedErrors) {
  const std::string good = safetensors_bytes({kA, kB});
  EXPECT_NE(header_error("abc").find("shorter than"), std::string::npos);
  std::string huge = good;
  huge[7] = 0x7f;
  EXPECT_NE(header_error(huge).find("header length"), std::string::npos);
  std::string past = good.substr(0, 20);
  EXPECT_NE(header_error(past).find("runs past the end"), std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, "{not json")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, "[1,2]")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, R"({"t":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})"))
                .find("unknown dtype 'F4'"),
            std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"))
                .find("tensor 't' byte size"),
            std::string::npos);
  EXPECT_NE(
      header_error(safetensors_bytes({kA}, R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"))
          .find("tensor 't' data_offsets end 16 runs past"),
      std::string::npos);
  EXPECT_NE(
      header_error(safetensors_bytes({kA}, R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"))
          .find("non-negative"),
      std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})"))
                .find("end < begin"),
            std::string::npos);
  EXPECT_NE(header_error(safetensors_bytes({kA}, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})") +
                         "xx")
                .find("overlap"),
            std::string::npos);
}

TEST(Checkpoint, SingleFileReadsAndCanonicalNames) {
  fs::path d = temp_dir("single");
  RawTensor vl = kB;
  vl.name = "language_model.lm_head.weight";
  RawTensor vision{"vision_tower.vision_model.x", "F32", {1}, as_bytes(std::vector<float>{0})};
  RawTensor mtp{"language_model.model.mtp.layers.0.x", "F32", {1}, as_bytes(std::vector<float>{0})};
  write_file((d / "model.safetensors").string(), safetensors_bytes({kA, vl, vision, mtp}));
  Checkpoint c(d.string());
  EXPECT_TRUE(c.has("lm_head.weight"));
  EXPECT_TRUE(c.has("vision.tower.x"));
  EXPECT_EQ(c.num_ignored(), 1u);  // the MTP head
  EXPECT_EQ(c.read_f32("lm_head.weight", {1, 2}), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(c.read_f32("model.norm.weight", {2}), (std::vector<float>{1.5f, -2.0f}));
  try {
    c.read_f32("model.norm.weight", {3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [2], expected [3]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Checkpoint::canonical_name("language_model.model.layers.3.mlp.w"), "model.layers.3.mlp.w");
  EXPECT_EQ(Checkpoint::canonical_name("language_model.model.mtp.layers.0.x"), "");
  // The vision path, in the release's names and in those transformers' save_pretrained writes.
  EXPECT_EQ(Checkpoint::canonical_name("vision_tower.vision_model.encoder.layers.2.mlp.fc1.weight"),
            "vision.tower.encoder.layers.2.mlp.fc1.weight");
  EXPECT_EQ(Checkpoint::canonical_name(
                "model.vision_tower.vision_model.encoder.layers.2.block_sparse_moe.fc1.bias"),
            "vision.tower.encoder.layers.2.mlp.fc1.bias");
  EXPECT_EQ(Checkpoint::canonical_name("vision_tower.vision_model.embeddings.proj.weight"),
            "vision.tower.embeddings.patch_embedding.weight");
  EXPECT_EQ(Checkpoint::canonical_name("multi_modal_projector.linear_2.bias"),
            "vision.projector.linear_2.bias");
  EXPECT_EQ(Checkpoint::canonical_name("patch_merge_mlp.linear_1.weight"), "vision.merge.linear_1.weight");
  EXPECT_EQ(Checkpoint::canonical_name("model.multi_modal_projector.merge_linear_1.weight"),
            "vision.merge.linear_1.weight");
}

TEST(Checkpoint, ShardedIndexAndItsErrors) {
  fs::path d = temp_dir("sharded");
  write_file((d / "a.safetensors").string(), safetensors_bytes({kA}));
  write_file((d / "b.safetensors").string(), safetensors_bytes({kB}));
  write_file((d / "model.safetensors.index.json").string(),
             R"({"weight_map": {"model.norm.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}})");
  Checkpoint c(d.string());
  EXPECT_EQ(c.num_files(), 2u);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));

  write_file((d / "model.safetensors.index.json").string(),
             R"({"weight_map": {"x": "missing.safetensors"}})");
  try {
    Checkpoint bad(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos);
  }
  write_file((d / "model.safetensors.index.json").string(), R"({"weight_map": {"x": "../etc/passwd"}})");
  EXPECT_THROW(Checkpoint bad2(d.string()), Error);
  // The same tensor in two shards.
  write_file((d / "b.safetensors").string(), safetensors_bytes({kA}));
  write_file((d / "model.safetensors.index.json").string(),
             R"({"weight_map": {"model.norm.weight": "a.safetensors", "y": "b.safetensors"}})");
  try {
    Checkpoint dup(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("appears twice"), std::string::npos);
  }
  EXPECT_THROW(Checkpoint none(temp_dir("empty").string()), Error);
}

TEST(Checkpoint, Mxfp8Dequantisation) {
  // Two rows of 64 inputs: fp8 1.0 (0x38) everywhere, scales 2^(s-127) per 32 inputs.
  fs::path d = temp_dir("mxfp8");
  RawTensor w{"model.layers.0.self_attn.q_proj.weight", "F8_E4M3", {2, 64}, std::string(128, '\x38')};
  w.bytes[0] = '\x3c';  // 1.5
  RawTensor s{"model.layers.0.self_attn.q_proj.weight_scale_inv",
              "U8",
              {2, 2},
              as_bytes(std::vector<uint8_t>{127, 129, 120, 127})};
  write_file((d / "model.safetensors").string(), safetensors_bytes({w, s}));
  Checkpoint c(d.string());
  std::vector<float> v = c.read_f32("model.layers.0.self_attn.q_proj.weight", {2, 64});
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[31], 1.0f);
  EXPECT_EQ(v[32], 4.0f);
  EXPECT_EQ(v[64], 1.0f / 128);
  EXPECT_EQ(v[127], 1.0f);

  fs::path d2 = temp_dir("mxfp8bad");
  write_file((d2 / "model.safetensors").string(), safetensors_bytes({w}));
  try {
    Checkpoint(d2.string()).read_f32("model.layers.0.self_attn.q_proj.weight", {2, 64});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight_scale_inv"), std::string::npos);
  }
}

}  // namespace
}  // namespace m3::testing
