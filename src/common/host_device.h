// M3_HOST_DEVICE: functions shared by host code and CUDA kernels (inline on the host; forced inline
// __host__ __device__ under nvcc).
#pragma once

#if defined(__CUDACC__)
#define M3_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define M3_HOST_DEVICE inline
#endif
