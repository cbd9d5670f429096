// `m3 serve MODEL [flags]`: the OpenAI- and Anthropic-compatible server.
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

void register_serve_command(CLI::App& app, int& exit_code);

}  // namespace m3
