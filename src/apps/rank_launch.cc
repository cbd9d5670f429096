// Role decision and the worker's life: tag the logs, leave signals to rank 0, answer calls until shutdown.
#include "apps/rank_launch.h"

#include <csignal>

#include "common/error.h"
#include "common/log.h"
#include "dist/mpi_communicator.h"
#include "dist/tcp_communicator.h"
#include "model/ranked_backend.h"

namespace m3 {

void add_rank_flags(CLI::App& cmd, dist::LaunchFlags& f) {
  cmd.add_option("--nnodes", f.nnodes, "Nodes of a launch without mpirun / srun (SGLang)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--node-rank", f.node_rank, "This node's index in such a launch")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--dist-init-addr", f.dist_init_addr, "host:port of rank 0's rendezvous in such a launch");
  cmd.add_option("--dist-timeout", f.timeout_s,
                 "Seconds a collective may wait for the other ranks before the run is aborted")
      ->check(CLI::PositiveNumber);
}

std::optional<std::shared_ptr<dist::Communicator>> start_ranks(const dist::LaunchFlags& given,
                                                               const std::string& device,
                                                               const std::string& model_dir, int* exit_code) {
  dist::LaunchFlags flags = given;
  flags.cpu = device == "cpu";
  const dist::RankEnv env = dist::rank_env();
  const dist::LaunchRole role = dist::launch_role(flags, env);
  if (role == dist::LaunchRole::kSingle) return std::shared_ptr<dist::Communicator>();
  const std::string tp = "--tensor-parallel-size " + std::to_string(flags.world_size);
  if (device != "cpu" && device != "cuda")
    fail(ErrorKind::kUnsupported, tp + " on --device " + device + ": ranks run the cpu or cuda backend");
  if (flags.cpu && !dist::mpi_built())
    fail(ErrorKind::kUnsupported, tp + ": CPU ranks run over MPI, and this binary was built without it");
  if (role == dist::LaunchRole::kSpawn) {
    *exit_code = dist::spawn_local_ranks(
        dist::spawn_plan(flags, flags.cpu ? dist::SpawnVia::kMpirun : dist::SpawnVia::kDirect));
    return std::nullopt;
  }
  // A self-spawned CUDA rank meets the others at its rendezvous; launcher-started ranks use MPI (with
  // --dist-init-addr they may use the rendezvous instead).
  std::shared_ptr<dist::Communicator> comm;
  const std::string rendezvous = !env.rendezvous.empty() ? env.rendezvous : flags.dist_init_addr;
  if (!rendezvous.empty() && !flags.cpu)
    comm = dist::join_tcp_world(rendezvous, env.rank, env.size, flags.timeout_s);
  else if (dist::mpi_built())
    comm = dist::join_mpi_world(flags.timeout_s);
  else
    fail(ErrorKind::kUnsupported, tp + " under " + env.launcher +
                                      ": this binary has no MPI; pass --dist-init-addr HOST:PORT (rank 0's "
                                      "node) for the ranks to meet over TCP");
  if (comm->rank() == 0) {
    dist::register_rank0_with_supervisor();
    log_info("tensor parallel over ", comm->size(), " ranks (", env.launcher, "); this is ",
             comm->describe());
    return comm;
  }
  set_log_tag("rank " + std::to_string(comm->rank()));
  std::signal(SIGTERM, SIG_IGN);  // rank 0 drains and then releases the workers
  std::signal(SIGINT, SIG_IGN);
  *exit_code = serve_rank_calls(model_dir, comm);
  return std::nullopt;
}

std::unique_ptr<dist::PeerWatch> watch_local_ranks(std::shared_ptr<dist::Communicator> comm) {
  if (!comm || comm->size() == 1) return nullptr;
  std::vector<dist::PeerProcess> local;
  const auto all = comm->processes();
  for (const auto& p : all)
    if (p.rank != comm->rank() && p.host == all.at(comm->rank()).host) local.push_back(p);
  return std::make_unique<dist::PeerWatch>(local, [comm](const std::string& why) {
    dist::run_fault_handler(why);
    comm->abort(why);
  });
}

}  // namespace m3
