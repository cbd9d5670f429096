// Discovery of the CUDA devices of this machine (count, name, compute capability, memory). Safe to call on a
// machine without a GPU or driver: it then reports no devices instead of failing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace m3::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0, free_memory = 0;
  size_t l2_bytes = 0;
};

std::vector<DeviceInfo> list_devices();
// Why no device is usable (driver missing, no device...), or "" when at least one is.
std::string no_device_reason();
// Streaming multiprocessors of the current device (132 when it cannot be queried): launchers size grids by it.
int current_sm_count();

}  // namespace m3::cuda
