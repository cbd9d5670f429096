// Counter-based random values: the 64-bit mix the sampler's random source also uses, and synthetic weights
// where value = f(key + element index), so a tensor is the same whatever the chunking, thread count or device
// that fills it. Host and device (nvcc) inline.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace m3 {

// splitmix64's finaliser: a bijective 64-bit mix.
M3_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

M3_HOST_DEVICE uint64_t splitmix64(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ull); }

// Approximately N(0, 1): the sum of four uniforms, rescaled (Irwin-Hall).
M3_HOST_DEVICE float counter_gaussian(uint64_t key) {
  const uint64_t a = splitmix64(key), b = splitmix64(a);
  const float s = static_cast<float>(a & 0xffffffff) + static_cast<float>(a >> 32) +
                  static_cast<float>(b & 0xffffffff) + static_cast<float>(b >> 32);
  return (s / 4294967296.0f - 2.0f) * 1.7320508f;
}

// FNV-1a of a tensor name: the per-tensor part of the key (stable across platforms, unlike std::hash).
inline uint64_t name_key(const char* s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ull;
  return h;
}

}  // namespace m3
