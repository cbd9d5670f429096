// `m3 bench`: the benchmark command group. `m3 bench serve` load-tests an OpenAI-compatible server with
// vLLM's `vllm bench serve` flags, report and result JSON (src/bench). Further benchmarks register their own
// subcommand next to register_bench_serve_command.
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

// Adds `bench` to `app` with every bench subcommand; the one that runs sets `exit_code`.
void register_bench_command(CLI::App& app, int& exit_code);

// Adds `serve` to the `bench` group.
void register_bench_serve_command(CLI::App& bench, int& exit_code);

}  // namespace m3
