// `m3 tokenize` / `m3 detokenize`: the server's /tokenize and /detokenize on the command line, one JSON
// request on stdin, one JSON answer on stdout.
#pragma once

#include <CLI/CLI.hpp>

namespace m3 {

void register_tokenize_commands(CLI::App& app, int& exit_code);

}  // namespace m3
