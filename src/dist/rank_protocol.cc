// A call is two broadcasts from rank 0: a fixed header (call, payload length), then the payload.
#include "dist/rank_protocol.h"

#include "common/error.h"

namespace m3::dist {
namespace {
struct Header {
  uint32_t call = 0;
  uint32_t reserved = 0;
  uint64_t bytes = 0;
};
}  // namespace

void post_call(Communicator& comm, RankCall call, const std::string& payload) {
  M3_CHECK(comm.rank() == 0, "only rank 0 posts calls");
  if (comm.size() == 1) return;
  Header h{static_cast<uint32_t>(call), 0, payload.size()};
  comm.broadcast(&h, sizeof h, 0);
  if (!payload.empty()) comm.broadcast(const_cast<char*>(payload.data()), payload.size(), 0);
}

RankCall wait_call(Communicator& comm, std::string* payload) {
  M3_CHECK(comm.rank() != 0, "rank 0 does not wait for calls");
  Header h;
  comm.broadcast(&h, sizeof h, 0, /*idle=*/true);
  if (h.call > static_cast<uint32_t>(RankCall::kForward))
    fail(ErrorKind::kInternal, "unknown rank call " + std::to_string(h.call));
  payload->assign(h.bytes, '\0');
  if (h.bytes) comm.broadcast(payload->data(), h.bytes, 0);
  return static_cast<RankCall>(h.call);
}

WorkerRelease::~WorkerRelease() {
  try {
    release();
  } catch (...) {  // a failed release cannot be reported from a destructor; the launcher ends the ranks
  }
}

void post_shutdown(Communicator& comm) {
  if (comm.workers_released) return;
  comm.workers_released = true;
  post_call(comm, RankCall::kShutdown);
}

void WorkerRelease::release() {
  post_shutdown(comm_);
}

}  // namespace m3::dist
