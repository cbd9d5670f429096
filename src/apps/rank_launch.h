// What `m3 serve` and `m3 generate` do first when the model spans several ranks: the rank flags (vLLM's /
// SGLang's spellings), then one of three roles for this process: the supervisor of self-spawned ranks, a
// worker rank (answers rank 0's calls, never reads input or serves HTTP), or rank 0 (goes on to run the
// command with the communicator in BackendOptions).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "dist/communicator.h"
#include "dist/launch.h"

namespace m3 {

// --nnodes, --node-rank, --dist-init-addr, --dist-timeout (the TP size flag is the command's own).
void add_rank_flags(CLI::App& cmd, dist::LaunchFlags& flags);

// Starts this process's part of the run. Returns the communicator rank 0 goes on with (null for one rank),
// or std::nullopt when this process's work is over (supervisor or worker) with its exit status in
// *exit_code. `device` is the resolved backend ("cpu", ...): ranks need one that runs tensor parallel.
std::optional<std::shared_ptr<dist::Communicator>> start_ranks(const dist::LaunchFlags& flags,
                                                               const std::string& device,
                                                               const std::string& model_dir, int* exit_code);

// Rank 0: watches the ranks on this machine; when one exits, runs the fault handler (dist/fault.h) and ends
// the run with a non-zero status. Null with one rank.
std::unique_ptr<dist::PeerWatch> watch_local_ranks(std::shared_ptr<dist::Communicator> comm);

}  // namespace m3
