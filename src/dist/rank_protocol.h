// How rank 0 drives the other ranks (nano-vllm's shape): rank 0 posts a call with its payload, the workers
// loop waiting for the next one. Calls: load the model shard (the payload is rank 0's options), run a forward
// pass (the payload is the step), shut down. Payloads are opaque bytes here; the model layer encodes them.
#pragma once

#include <cstdint>
#include <string>

#include "dist/communicator.h"

namespace m3::dist {

enum class RankCall : uint32_t { kShutdown = 0, kLoad = 1, kForward = 2 };

// Rank 0: sends `call` and `payload` to every other rank.
void post_call(Communicator& comm, RankCall call, const std::string& payload = {});

// Worker ranks: waits (idle, no timeout) for rank 0's next call and its payload.
RankCall wait_call(Communicator& comm, std::string* payload);

// Rank 0: posts kShutdown unless it was already posted on `comm` (the model posts it before it releases its
// shard, since NCCL's teardown waits for every rank; the WorkerRelease below covers early exits).
void post_shutdown(Communicator& comm);

// Rank 0's guarantee that the workers end with it: posts kShutdown once, when asked or when destroyed, so a
// rank 0 that returns early (an error before the model loaded) never leaves the workers waiting forever.
class WorkerRelease {
 public:
  explicit WorkerRelease(Communicator& comm) : comm_(comm) {}
  ~WorkerRelease();
  WorkerRelease(const WorkerRelease&) = delete;
  WorkerRelease& operator=(const WorkerRelease&) = delete;
  void release();

 private:
  Communicator& comm_;
};

}  // namespace m3::dist
