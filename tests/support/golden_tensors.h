// Reference tensors and metadata written by the golden scripts (tools/goldens/*.py): a safetensors file of
// float32 / uint8 tensors beside a JSON file, read with GoogleTest expectations on the way; and the small
// helpers the vision and video golden tests compare with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/safetensors.h"

namespace m3::testing {

struct GoldenTensors {
  SafetensorsFile file;
  nlohmann::json meta;
  // `stem`.safetensors and `stem`.json.
  explicit GoldenTensors(const std::string& stem) : file(stem + ".safetensors") {
    std::ifstream(stem + ".json") >> meta;
  }
  bool has(const std::string& name) const { return file.find(name) != nullptr; }
  std::vector<float> f32(const std::string& name) const {
    const TensorInfo* t = file.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    EXPECT_EQ(t->dtype, DType::kF32) << name;
    const float* p = reinterpret_cast<const float*>(file.tensor_data(*t));
    return {p, p + t->numel()};
  }
  std::vector<uint8_t> u8(const std::string& name) const {
    const TensorInfo* t = file.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    EXPECT_EQ(t->dtype, DType::kU8) << name;
    const uint8_t* p = file.tensor_data(*t);
    return {p, p + t->numel()};
  }
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace m3::testing
