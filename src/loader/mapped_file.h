// Read-only memory map of a whole file (RAII). Weights are read straight from the page cache, so opening a
// multi-hundred-GB checkpoint costs nothing until tensors are touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace m3 {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws m3::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace m3
