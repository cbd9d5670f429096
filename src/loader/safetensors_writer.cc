// Header JSON (8-byte aligned, as the reference writer pads it) then data in 64 MB chunks.
#include "loader/safetensors_writer.h"

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const uint64_t bytes = static_cast<uint64_t>(n) * dtype_size(dtype);
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(fill), offset_, offset_ + bytes});
  offset_ += bytes;
}

const std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}};
  for (const Entry& t : tensors_)
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) fail(ErrorKind::kInvalidArgument, path + ": cannot create");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((header.size() >> (8 * i)) & 0xff);
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  std::vector<uint8_t> buf;
  for (const Entry& t : tensors_) {
    const size_t esize = dtype_size(t.dtype);
    const int64_t total = static_cast<int64_t>((t.end - t.begin) / esize);
    const int64_t chunk = std::max<int64_t>(1, (64 << 20) / static_cast<int64_t>(esize));
    for (int64_t at = 0; at < total && ok; at += chunk) {
      const int64_t n = std::min(chunk, total - at);
      buf.resize(static_cast<size_t>(n) * esize);
      t.fill(buf.data(), at, n);
      ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
    }
  }
  if (!ok || std::fflush(f.get()) != 0)
    fail(ErrorKind::kInvalidArgument, path + ": write failed (disk full?)");
}

}  // namespace m3
