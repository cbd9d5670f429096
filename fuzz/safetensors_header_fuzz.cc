// Fuzz target: the safetensors header parser must reject any byte string with m3::Error, never crash, hang
// or read out of bounds; an accepted header's tensors must lie inside the buffer.
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    m3::SafetensorsHeader h = m3::parse_safetensors_header(data, size, "fuzz");
    for (const auto& [name, t] : h.tensors)
      if (h.data_start + t.end > size || t.end < t.begin) std::abort();
  } catch (const m3::Error&) {
  }
  return 0;
}
