// Linear layers with MXFP8 weights (kernels/fp8.h) the two ways the model runs them, against cuBLAS's bf16
// GEMM (bf16 in, fp32 out, fp32 compute) on the same shapes: the decode GEMV (linear_gemv_fp8, T <= 64) and,
// for prefill-sized batches, dequantising the weights to bf16 then cuBLAS (fp8_dequant_cublas; its floor
// counts the bytes of both passes). Shapes: the dense prefill chunk (T = 8192, K = 6144; N = 10240, 6144,
// 24576), decode batches (T = 1..64) and per-expert MoE GEMMs (T = 64..512; gate/up 6144 x 6144, down
// 6144 x 3072). Floor bytes: the weights (fp8 + scales, or bf16), X and C once.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#include "kernels/kernels.h"

namespace m3::bench {
namespace {

struct GemmShape {
  int T, N, K;
};

M3_BENCH(fp8_linear) {
  std::vector<GemmShape> shapes = {
      {8192, 10240, 6144}, {8192, 6144, 6144}, {8192, 24576, 6144}, {1, 10240, 6144},  {8, 10240, 6144},
      {32, 10240, 6144},   {64, 10240, 6144},  {64, 6144, 6144},    {128, 6144, 6144}, {256, 6144, 6144},
      {512, 6144, 6144},   {64, 6144, 3072},   {256, 6144, 3072},   {512, 6144, 3072}};
  if (opts.quick) shapes = {{8192, 6144, 6144}, {256, 6144, 6144}};
  auto name = [](const GemmShape& s) {
    return "T=" + std::to_string(s.T) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
  };
  bool any = false;
  for (const auto& s : shapes)
    any |= wanted(opts, "cublas_bf16", name(s)) || wanted(opts, "fp8_dequant_cublas", name(s)) ||
           wanted(opts, "linear_gemv_fp8", name(s));
  if (!any) return;

  size_t max_w = 0, max_x = 0, max_c = 0;
  for (const auto& s : shapes) {
    max_w = std::max(max_w, size_t(s.N) * s.K);
    max_x = std::max(max_x, size_t(s.T) * s.K);
    max_c = std::max(max_c, size_t(s.T) * s.N);
  }
  Arena a;
  auto* wb = a.get<__nv_bfloat16>(max_w);
  auto* deq = a.get<__nv_bfloat16>(max_w);
  auto* x = a.get<__nv_bfloat16>(max_x);
  auto* c = a.get<float>(max_c);
  auto* w8 = a.get<uint8_t>(max_w);
  auto* s8 = a.get<uint8_t>(max_w / cuda::kFp8Block);
  a.fill_bf16(wb, max_w, 0.02f, 1);
  a.fill_bf16(x, max_x, 1.0f, 2);
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "fp8_linear: cublasCreate failed\n");
    return;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  cublasSetStream(blas, stream);
  const size_t workspace = size_t(32) << 20;  // explicit, so that the timing graphs can capture cuBLAS
  cublasSetWorkspace(blas, a.alloc(workspace), workspace);

  for (const auto& s : shapes) {
    const std::string shape = name(s);
    const double flops = 2.0 * s.T * s.N * s.K;
    const double io = double(s.T) * s.K * 2 + double(s.T) * s.N * 4;
    cuda::quantize_mxfp8(wb, s.N, s.K, w8, s8, stream);  // the weights an fp8 checkpoint would hold
    cudaStreamSynchronize(stream);
    const cuda::Fp8Matrix W{w8, s8};
    auto bf16_gemm = [&](const __nv_bfloat16* w, cudaStream_t st) {  // c = x . w^T on cuBLAS
      const float one = 1.0f, zero = 0.0f;
      cublasSetStream(blas, st);
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, s.T, s.K, &one, w, CUDA_R_16BF, s.K, x, CUDA_R_16BF,
                   s.K, &zero, c, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    // Times `launch` as `kernel` when the filter wants it; weight_bytes: what it must read of the weights.
    auto measure = [&](const char* kernel, double weight_bytes, const char* note, auto&& launch) {
      if (!wanted(opts, kernel, shape)) return;
      Measurement m;
      m.kernel = kernel;
      m.shape = shape;
      m.us = time_us(launch, stream, opts.iters);
      m.bytes = weight_bytes + io;
      m.flops = flops;
      m.note = note;
      report(m);
    };
    const double n_weights = double(s.N) * s.K, fp8_bytes = n_weights * (1.0 + 1.0 / cuda::kFp8Block);
    if (s.T <= 64)
      measure("linear_gemv_fp8", fp8_bytes, "weights read once per 32 tokens",
              [&](cudaStream_t st) { cuda::linear_gemv(nullptr, W, s.N, s.K, x, s.T, c, st); });
    measure("fp8_dequant_cublas", fp8_bytes + 4 * n_weights, "dequantise to bf16, then cuBLAS",
            [&](cudaStream_t st) {
              cuda::dequantize_mxfp8(W, s.N, s.K, deq, st);
              bf16_gemm(deq, st);
            });
    measure("cublas_bf16", 2 * n_weights, "bf16 weights (the comparison)",
            [&](cudaStream_t st) { bf16_gemm(wb, st); });
  }
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace m3::bench
