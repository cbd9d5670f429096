// `m3 generate`: offline batched generation from a JSONL file of requests (the interface later checks use).
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

// Adds the subcommand to `app`; its callback runs the generation and sets `exit_code`.
void register_generate_command(CLI::App& app, int& exit_code);

}  // namespace m3
