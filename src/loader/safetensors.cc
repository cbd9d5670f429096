// safetensors header parsing and validation.
#include "loader/safetensors.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit (100 MB)

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  fail(ErrorKind::kCorruptData, source + ": malformed safetensors: " + what);
}

uint64_t checked_u64(const nlohmann::json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    corrupt(source, what + " must be a non-negative integer");
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& e, const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (!e.is_object()) corrupt(source, where + " entry is not an object");
  TensorInfo t;
  t.name = name;
  if (!e.contains("dtype") || !e["dtype"].is_string()) corrupt(source, where + " has no dtype");
  auto dt = parse_dtype(e["dtype"].get<std::string>());
  if (!dt) corrupt(source, where + " has unknown dtype '" + e["dtype"].get<std::string>() + "'");
  t.dtype = *dt;
  if (!e.contains("shape") || !e["shape"].is_array()) corrupt(source, where + " has no shape");
  uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    uint64_t dim = checked_u64(d, source, where + " shape entry");
    if (dim > (1ull << 40) || (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / 8))
      corrupt(source, where + " shape is too large");
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    corrupt(source, where + " data_offsets must be [begin, end]");
  t.begin = checked_u64(e["data_offsets"][0], source, where + " data_offsets");
  t.end = checked_u64(e["data_offsets"][1], source, where + " data_offsets");
  if (t.end < t.begin) corrupt(source, where + " data_offsets end < begin");
  if (t.end - t.begin != numel * dtype_size(t.dtype))
    corrupt(source, where + " byte size " + std::to_string(t.end - t.begin) +
                        " does not match shape x dtype (" + std::to_string(numel * dtype_size(t.dtype)) +
                        ")");
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 8) corrupt(source, "file is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeaderBytes) corrupt(source, "header length " + std::to_string(n) + " exceeds 100 MB");
  if (n > size - 8) corrupt(source, "header length " + std::to_string(n) + " runs past the end of the file");
  auto j = nlohmann::json::parse(data + 8, data + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) corrupt(source, "header is not valid JSON");
  if (!j.is_object()) corrupt(source, "header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) corrupt(source, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        if (m.value().is_string()) h.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    TensorInfo t = parse_entry(it.key(), it.value(), source);
    if (t.end > data_size)
      corrupt(source, "tensor '" + t.name + "' data_offsets end " + std::to_string(t.end) +
                          " runs past the end of the file (data section is " + std::to_string(data_size) +
                          " bytes)");
    h.tensors.emplace(t.name, std::move(t));
  }
  // Tensors must not overlap: a corrupt file could otherwise alias two weights.
  std::vector<const TensorInfo*> order;
  for (const auto& [name, t] : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end && order[i]->begin != order[i]->end)
      corrupt(source, "tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(path), header_(parse_safetensors_header(file_.data(), file_.size(), path)) {}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = header_.tensors.find(name);
  return it == header_.tensors.end() ? nullptr : &it->second;
}

}  // namespace m3
