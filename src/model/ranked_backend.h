// The model on several ranks (one process each; dist/rank_protocol.h carries the calls). Rank 0's
// load_backend() posts the load to the workers (each runs serve_rank_calls), loads its own shard, gathers
// every rank's outcome and memory, and returns a backend whose forward() posts the step to the workers before
// running its own shard: rank 0's engine decides every step, every rank computes its part, and the results
// (logits) arrive complete on rank 0 through the shards' collectives.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"
#include "model/backend.h"

namespace m3 {

// Rank 0 (options.comm has several ranks): the whole load. Throws naming the rank, host and error when any
// rank failed to load; the workers then wait for the next call (rank 0's exit releases them).
std::unique_ptr<ModelBackend> load_on_ranks(const std::string& model_dir, const BackendOptions& options);

// Worker ranks: answers rank 0's calls until it posts kShutdown; returns the process exit status. A forward
// pass that fails on a worker aborts every rank (the step cannot complete without it).
int serve_rank_calls(const std::string& model_dir, std::shared_ptr<dist::Communicator> comm);

}  // namespace m3
