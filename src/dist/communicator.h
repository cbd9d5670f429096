// Collectives between the ranks that run one model, on host memory: what the CPU backend's tensor parallelism
// needs (an all-reduce of fp32 activations, an all-gather of vocabulary-parallel logits) and what every
// backend's step protocol needs (rank 0 broadcasting the step). One rank is a communicator too (every
// collective is then a copy), so the model has one code path for TP 1..N. Implementations: local (one rank),
// MPI (CPU ranks, dist/mpi_communicator.h). Every collective is blocking; a collective that does not complete
// within the communicator's timeout (a dead or hung rank) runs the fault handler (dist/fault.h) and aborts
// the whole run with an error naming it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dist/fault.h"

namespace m3::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "rank 1 of 4 on host-a (pid 1234)": how errors and logs name this process.
  std::string describe() const;

  // Every rank receives rank `root`'s `bytes` bytes in `data`. `idle`: the caller may wait indefinitely and
  // cheaply (worker ranks waiting for rank 0's next call): no timeout, and the wait sleeps instead of
  // spinning.
  virtual void broadcast(void* data, size_t bytes, int root, bool idle = false) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's `send`, on every rank.
  virtual void all_gather(const void* send, size_t bytes, void* recv) = 0;
  // Ends every rank of the run at once with a non-zero status (after logging `why`).
  [[noreturn]] virtual void abort(const std::string& why) = 0;
  // The process of every rank (rank 0's peer watch uses those on its own host).
  virtual std::vector<PeerProcess> processes() const { return {}; }

  // Elementwise sum over the ranks, added in rank order, so every rank gets bit-identical results whatever
  // the transport's reduction order (the ranks then agree on routing and sampling to the last bit).
  void all_reduce_sum(float* data, size_t n);
  // Data-parallel attention's token exchange: every rank's part, concatenated in rank order, on every rank.
  // bytes[r]: rank r's size, the same vector on every rank (the step says how many tokens each rank has).
  void all_gather_varying(const void* send, const std::vector<size_t>& bytes, void* recv);
  // `data` holds sum(counts) floats on every rank; rank r receives in `mine` its counts[r] elements (after
  // those of the ranks before it) summed over the ranks in rank order, as all_reduce_sum adds them.
  void reduce_scatter_sum(float* data, const std::vector<size_t>& counts, float* mine);
  // Each rank's string, indexed by rank, on every rank (start-up reports and errors).
  std::vector<std::string> all_gather_strings(const std::string& mine);

  bool workers_released = false;  // rank 0 has posted the shutdown call (dist/rank_protocol.h)

 private:
  std::vector<float> gathered_;  // all_reduce_sum's receive buffer, kept between calls
};

// The communicator of a run with one rank.
std::shared_ptr<Communicator> local_communicator();

// This machine's host name.
std::string host_name();
// Every rank's host and pid (collective: each transport calls it once it is connected).
std::vector<PeerProcess> gather_processes(Communicator& comm);

}  // namespace m3::dist
