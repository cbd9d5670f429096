// Test support for GPU tests: skip with a message where no CUDA device is usable.
#pragma once

#include <gtest/gtest.h>

#include "kernels/device_info.h"

#define M3_REQUIRE_GPU()                                                                    \
  do {                                                                                      \
    if (::m3::cuda::list_devices().empty())                                                 \
      GTEST_SKIP() << "no CUDA device (" << ::m3::cuda::no_device_reason() << "): skipped"; \
  } while (0)
