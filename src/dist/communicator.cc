// The collectives every transport shares (ordered all-reduce, reduce-scatter, varying and string gathers) and
// the one-rank communicator.
#include "dist/communicator.h"

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace m3::dist {

void Communicator::all_reduce_sum(float* data, size_t n) {
  const int world = size();
  if (world == 1) return;
  gathered_.resize(n * world);
  all_gather(data, n * sizeof(float), gathered_.data());
  std::memcpy(data, gathered_.data(), n * sizeof(float));
  for (int r = 1; r < world; ++r) {
    const float* part = gathered_.data() + r * n;
    for (size_t i = 0; i < n; ++i) data[i] += part[i];
  }
}

void Communicator::all_gather_varying(const void* send, const std::vector<size_t>& bytes, void* recv) {
  const int world = size();
  size_t longest = 0;
  for (size_t b : bytes) longest = std::max(longest, b);
  if (longest == 0) return;
  std::vector<char> padded(longest, 0), all(longest * world);
  std::memcpy(padded.data(), send, bytes[rank()]);
  all_gather(padded.data(), longest, all.data());
  char* out = static_cast<char*>(recv);
  for (int r = 0; r < world; ++r) {
    std::memcpy(out, all.data() + r * longest, bytes[r]);
    out += bytes[r];
  }
}

void Communicator::reduce_scatter_sum(float* data, const std::vector<size_t>& counts, float* mine) {
  size_t total = 0, first = 0;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) first = total;
    total += counts[r];
  }
  if (total == 0) return;       // the same on every rank
  all_reduce_sum(data, total);  // the host ranks' reference: every rank sums it all, then keeps its part
  std::memcpy(mine, data + first, counts[rank()] * sizeof(float));
}

std::vector<std::string> Communicator::all_gather_strings(const std::string& mine) {
  const int world = size();
  std::vector<uint64_t> lengths(world);
  const uint64_t len = mine.size();
  all_gather(&len, sizeof len, lengths.data());
  uint64_t longest = 0;
  for (uint64_t l : lengths) longest = std::max(longest, l);
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * world, '\0');
  all_gather(padded.data(), longest, all.data());
  std::vector<std::string> out(world);
  for (int r = 0; r < world; ++r) out[r] = all.substr(r * longest, lengths[r]);
  return out;
}

std::string Communicator::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " on " + host_name() +
         " (pid " + std::to_string(getpid()) + ")";
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::vector<PeerProcess> gather_processes(Communicator& comm) {
  struct Entry {
    char host[64];
    int32_t pid;
  } mine{};
  std::snprintf(mine.host, sizeof mine.host, "%s", host_name().c_str());
  mine.pid = getpid();
  std::vector<Entry> all(comm.size());
  comm.all_gather(&mine, sizeof mine, all.data());
  std::vector<PeerProcess> out;
  for (int r = 0; r < comm.size(); ++r) out.push_back({r, all[r].host, all[r].pid});
  return out;
}

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void broadcast(void*, size_t, int root, bool) override {
    M3_CHECK(root == 0, "broadcast from a rank that does not exist");
  }
  void all_gather(const void* send, size_t bytes, void* recv) override {
    if (recv != send) std::memmove(recv, send, bytes);
  }
  [[noreturn]] void abort(const std::string& why) override {
    log_error(why);
    std::_Exit(1);
  }
};

}  // namespace

std::shared_ptr<Communicator> local_communicator() {
  return std::make_shared<LocalCommunicator>();
}

}  // namespace m3::dist
