// The host communicator of ranks started without MPI (self-spawned CUDA ranks, SGLang-style --nnodes /
// --dist-init-addr launches): rank 0 listens at the rendezvous address and every other rank connects to it,
// as torch's TCP store does. It carries the control plane only (start-up reports, NCCL's unique id, and rank
// 0's step calls, which SGLang broadcasts over its gloo group the same way); tensors go over NCCL. A lost
// connection is a lost rank: workers exit when rank 0 goes away, rank 0 runs the fault handler and ends.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace m3::dist {

// Joins `size` ranks at `addr` ("host:port"; rank 0 binds the port on all interfaces). Connecting gives up
// after `timeout_s`, as does any non-idle collective.
std::shared_ptr<Communicator> join_tcp_world(const std::string& addr, int rank, int size, double timeout_s);

}  // namespace m3::dist
