// Where this process sits among the ranks of a run, and how the ranks come to exist: started by a launcher
// (Open MPI's mpirun, Slurm's srun, any PMI launcher: the rank is read from their environment) or, with no
// launcher, self-spawned on this machine (`m3 serve --tensor-parallel-size N` re-runs itself as N ranks and
// supervises them: signals go to rank 0, which drains and stops the workers; the exit status is the ranks'
// own, non-zero when any rank died). CPU ranks are spawned under mpirun (they talk MPI); CUDA ranks directly,
// meeting at a TCP rendezvous on rank 0 (they talk NCCL).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace m3::dist {

struct RankEnv {
  std::string launcher;  // "" (none), "mpirun", "srun", "pmi", "m3" (self-spawned)
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  std::string rendezvous;  // self-spawned without mpirun: rank 0's host:port (M3_DIST_INIT_ADDR)
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads the launcher's environment (M3_DIST_* of a self-spawn, OMPI_COMM_WORLD_*, SLURM_PROCID /
// SLURM_STEP_NUM_TASKS / SLURM_LOCALID, PMI_RANK / PMI_SIZE, PMIX_RANK). Throws kInvalidArgument on a
// malformed value.
RankEnv rank_env_from(const EnvLookup& env);
RankEnv rank_env();  // of this process

struct LaunchFlags {
  int world_size = 1;             // ranks the model needs (--tensor-parallel-size)
  int nnodes = 1, node_rank = 0;  // SGLang's launches without a launcher
  std::string dist_init_addr;     // host:port of rank 0's rendezvous (SGLang --dist-init-addr)
  bool cpu = false;               // CPU ranks (MPI) rather than CUDA ranks (NCCL)
  double timeout_s = 600;         // --dist-timeout: a collective stuck this long aborts the run
};

enum class LaunchRole {
  kSingle,    // one rank: nothing to launch
  kSpawn,     // no launcher: this process starts the ranks on this machine and supervises them
  kLaunched,  // a launcher (or a self-spawn) started this process as one of the ranks
};

// Decides the role from the flags and the environment; errors name the flag and the launcher's rank count
// when they disagree (mpirun -np 2 with --tensor-parallel-size 4).
LaunchRole launch_role(const LaunchFlags& flags, const RankEnv& env);

// The command line of this process (kept by main for the self-spawn).
void set_command_line(int argc, char** argv);

enum class SpawnVia {
  kMpirun,  // CPU ranks: mpirun starts them and MPI connects them
  kDirect,  // CUDA ranks: forked here, one per GPU, meeting at a TCP rendezvous on 127.0.0.1
};

// The ranks this machine starts: all of them, or with --nnodes N --node-rank i the i-th N-th of them
// (ranks i * world / N ...), meeting at --dist-init-addr.
struct SpawnPlan {
  int world_size = 1, first_rank = 0, count = 1;
  std::string rendezvous;  // kDirect: host:port of rank 0 ("" = a free port on 127.0.0.1)
  SpawnVia via = SpawnVia::kDirect;
};
SpawnPlan spawn_plan(const LaunchFlags& flags, SpawnVia via);

// kSpawn: runs this program's command line as the plan's ranks, forwards SIGTERM / SIGINT to rank 0 (a
// second signal kills every rank), and returns the exit status to end with: 0 when every rank ended cleanly,
// else the first failure's (a rank that dies takes the others down).
int spawn_local_ranks(const SpawnPlan& plan);

// Rank 0 of a self-spawned run tells its supervisor where to send signals (no-op otherwise).
void register_rank0_with_supervisor();

}  // namespace m3::dist
