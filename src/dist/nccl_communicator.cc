// NCCL through dlopen: the few entry points the engine uses, resolved once per process.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "dist/device_communicator.h"

namespace m3::dist {
namespace {

struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char* (*error_string)(ncclResult_t);
  ncclResult_t (*get_version)(int*);
};

const Nccl& nccl() {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("M3_NCCL_LIBRARY");
    const std::string name = env && *env ? env : "libnccl.so.2";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr)
      fail(ErrorKind::kUnsupported, "tensor parallelism on CUDA needs NCCL: cannot load " + name + " (" +
                                        dlerror() + "); set M3_NCCL_LIBRARY to libnccl.so.2's path");
    auto sym = [&](auto& fn, const char* s) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, s));
      if (fn == nullptr) fail(ErrorKind::kUnsupported, name + " has no " + s);
    };
    sym(n.get_unique_id, "ncclGetUniqueId");
    sym(n.comm_init_rank, "ncclCommInitRank");
    sym(n.all_reduce, "ncclAllReduce");
    sym(n.all_gather, "ncclAllGather");
    sym(n.comm_destroy, "ncclCommDestroy");
    sym(n.error_string, "ncclGetErrorString");
    sym(n.get_version, "ncclGetVersion");
  });
  return n;
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(ErrorKind::kInternal, std::string(what) + ": " + nccl().error_string(r));
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  explicit NcclCommunicator(Communicator& host) : rank_(host.rank()), size_(host.size()) {
    const Nccl& n = nccl();
    ncclUniqueId id{};
    if (rank_ == 0) check(n.get_unique_id(&id), "ncclGetUniqueId");
    host.broadcast(&id, sizeof id, 0);
    check(n.comm_init_rank(&comm_, size_, id, rank_), "ncclCommInitRank");
    int version = 0, device = 0;
    n.get_version(&version);
    cudaGetDevice(&device);
    if (rank_ == 0)
      log_info("NCCL ", version / 10000, ".", version / 100 % 100, ".", version % 100, ": ", size_,
               " ranks connected");
    log_debug("NCCL rank ", rank_, " on GPU ", device);
  }
  ~NcclCommunicator() override {
    if (comm_) nccl().comm_destroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, size_t n, CUstream_st* stream) override {
    check(nccl().all_reduce(data, data, n, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce");
  }
  void all_gather(const void* send, size_t bytes, void* recv, CUstream_st* stream) override {
    check(nccl().all_gather(send, recv, bytes, ncclUint8, comm_, stream), "ncclAllGather");
  }

 private:
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCommunicator> connect_nccl(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace m3::dist
