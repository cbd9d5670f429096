// Writes safetensors files tensor by tensor: the header is laid out first, then each tensor's bytes are
// produced by a fill callback in bounded chunks, so multi-GB checkpoints are written without holding them in
// memory. Used by `m3 make-random-model`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loader/dtype.h"

namespace m3 {

class SafetensorsWriter {
 public:
  // fill(dst, first_element, count) writes `count` elements starting at element `first_element`.
  using Fill = std::function<void(uint8_t* dst, int64_t first_element, int64_t count)>;

  void add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill);
  uint64_t data_bytes() const { return offset_; }
  size_t size() const { return tensors_.size(); }
  const std::vector<std::string> names() const;
  // Throws m3::Error naming the path on I/O failure.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Fill fill;
    uint64_t begin, end;
  };
  std::vector<Entry> tensors_;
  uint64_t offset_ = 0;
};

}  // namespace m3
