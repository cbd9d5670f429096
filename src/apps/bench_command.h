// `m3 bench`: the benchmark command group. `m3 bench serve` load-tests an OpenAI-compatible server with
// vLLM's `vllm bench serve` flags, report and result JSON (src/bench); `m3 bench kernels` runs the CUDA
// kernel benchmarks (benchmarks/, m3-kernel-bench).
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

// Adds `bench` to `app` with every bench subcommand; the one that runs sets `exit_code`.
void register_bench_command(CLI::App& app, int& exit_code);

// Adds `serve` to the `bench` group.
void register_bench_serve_command(CLI::App& bench, int& exit_code);

// Adds `grammar` (structured-output compile and mask times) to the `bench` group.
void register_bench_grammar_command(CLI::App& bench, int& exit_code);

// Adds `kernels` (runs m3-kernel-bench, found next to the m3 executable) to the `bench` group.
void register_bench_kernels_command(CLI::App& bench, int& exit_code);

}  // namespace m3
