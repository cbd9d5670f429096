// The safetensors format: 8-byte little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw data. The header parser is a pure function over bytes (it is
// the fuzz target); every inconsistency (offsets past the end, size != shape x dtype, overlaps) is an error
// naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/dtype.h"
#include "loader/mapped_file.h"

namespace m3 {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // absolute file offset of the data section
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates the header of a safetensors file of `size` bytes starting at `data`.
// `source` names the file in error messages. Throws m3::Error(kCorruptData) on any malformed input.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& source);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(const std::string& name) const;
  const uint8_t* tensor_data(const TensorInfo& t) const {
    return file_.data() + header_.data_start + t.begin;
  }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace m3
