// `m3 make-random-model`: writes a checkpoint with random weights in the released format (config.json in the
// release's spelling, bf16 safetensors with an fp32 router, sharded at 5 GB) at the real MiniMax-M3 widths or
// a tiny preset, so serving and kernels can be exercised without the 800 GB release.
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

void register_random_model_command(CLI::App& app, int& exit_code);

}  // namespace m3
