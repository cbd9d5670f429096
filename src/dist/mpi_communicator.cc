// MPI transport: non-blocking collectives completed by a polling loop, which gives every wait a deadline
// (the hang watchdog) and lets idle worker ranks sleep between polls instead of spinning a core.
#include "dist/mpi_communicator.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "common/error.h"
#include "common/log.h"

#ifdef M3_HAVE_MPI
#include <mpi.h>
#endif

namespace m3::dist {

#ifdef M3_HAVE_MPI
namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // The engine thread runs the collectives while other threads (HTTP, signals) never call MPI.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (provided < MPI_THREAD_SERIALIZED)
        fail(ErrorKind::kUnsupported, "the MPI library does not support MPI_THREAD_SERIALIZED");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    processes_ = gather_processes(*this);  // blocking: MPI_Iallgather + wait, before any other call
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void broadcast(void* data, size_t bytes, int root, bool idle) override {
    MPI_Request req;
    MPI_Ibcast(data, count(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    wait(req, idle, "broadcast");
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    MPI_Request req;
    MPI_Iallgather(send, count(bytes), MPI_BYTE, recv, count(bytes), MPI_BYTE, MPI_COMM_WORLD, &req);
    wait(req, false, "all-gather");
  }

  std::vector<PeerProcess> processes() const override { return processes_; }

  [[noreturn]] void abort(const std::string& why) override {
    log_error(describe(), ": ", why);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  static int count(size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX))
      fail(ErrorKind::kInternal, "MPI message of " + std::to_string(bytes) + " bytes is over 2 GiB");
    return static_cast<int>(bytes);
  }

  // Polls `req` to completion. Active collectives poll briefly then back off to short sleeps (ranks may share
  // cores); idle waits sleep up to a millisecond between polls. Past the deadline the run is aborted.
  void wait(MPI_Request& req, bool idle, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (polls < 200) continue;
      std::this_thread::sleep_for(std::chrono::microseconds(idle ? 1000 : 20));
      if (!idle && (polls & 255) == 0 &&
          std::chrono::steady_clock::now() - start > std::chrono::duration<double>(timeout_s_)) {
        const std::string why = std::string(what) + " did not complete in " + std::to_string(timeout_s_) +
                                " s (--dist-timeout): another rank is dead or hung";
        run_fault_handler(describe() + ": " + why);
        abort(why);
      }
    }
  }

  double timeout_s_;
  int rank_ = 0, size_ = 1;
  std::vector<PeerProcess> processes_;
};

}  // namespace

bool mpi_built() {
  return true;
}

std::shared_ptr<Communicator> join_mpi_world(double timeout_s) {
  return std::make_shared<MpiCommunicator>(timeout_s);
}

#else

bool mpi_built() {
  return false;
}

std::shared_ptr<Communicator> join_mpi_world(double) {
  fail(ErrorKind::kUnsupported,
       "CPU ranks run over MPI, and this binary was built without it (install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace m3::dist
