// Launcher environments, the launch decision, and the self-spawn supervisor (fork + exec of mpirun).
#include "dist/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace m3::dist {
namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

int env_int(const EnvLookup& env, const char* name, int fallback) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    fail(ErrorKind::kInvalidArgument,
         std::string("environment ") + name + "='" + v + "' is not a rank count");
  return static_cast<int>(x);
}

constexpr const char* kPidFileVar = "M3_SUPERVISOR_PIDFILE";

std::string find_mpirun() {
  if (const char* v = std::getenv("M3_MPIRUN"); v && *v) return v;
  const std::filesystem::path beside =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mpirun";
  if (std::filesystem::exists(beside)) return beside.string();
  return "mpirun";  // from PATH
}

}  // namespace

RankEnv rank_env_from(const EnvLookup& env) {
  RankEnv e;
  if (env("M3_DIST_RANK")) {
    e.launcher = "m3";
    e.rank = env_int(env, "M3_DIST_RANK", 0);
    e.size = env_int(env, "M3_DIST_WORLD_SIZE", 1);
    e.local_rank = env_int(env, "M3_DIST_LOCAL_RANK", e.rank);
    e.local_size = env_int(env, "M3_DIST_LOCAL_SIZE", e.size);
    e.rendezvous = env("M3_DIST_INIT_ADDR") ? env("M3_DIST_INIT_ADDR") : "";
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e.launcher = env(kPidFileVar) ? "m3" : "mpirun";
    e.rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0);
    e.size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (env("SLURM_STEP_ID") && env("SLURM_PROCID")) {  // a task of srun (not the sbatch script itself)
    e.launcher = "srun";
    e.rank = env_int(env, "SLURM_PROCID", 0);
    e.size = env_int(env, "SLURM_STEP_NUM_TASKS", env_int(env, "SLURM_NTASKS", 1));
    e.local_rank = env_int(env, "SLURM_LOCALID", 0);
    e.local_size = env_int(env, "SLURM_NTASKS_PER_NODE", 1);
  } else if (env("PMI_RANK") || env("PMIX_RANK")) {
    e.launcher = "pmi";
    e.rank = env_int(env, "PMI_RANK", env_int(env, "PMIX_RANK", 0));
    e.size = env_int(env, "PMI_SIZE", 1);
    e.local_rank = env_int(env, "MPI_LOCALRANKID", 0);
    e.local_size = env_int(env, "MPI_LOCALNRANKS", 1);
  }
  if (e.size < 1 || e.rank >= e.size)
    fail(ErrorKind::kInvalidArgument, "the launcher (" + e.launcher + ") says rank " +
                                          std::to_string(e.rank) + " of " + std::to_string(e.size));
  return e;
}

RankEnv rank_env() {
  return rank_env_from([](const char* name) { return std::getenv(name); });
}

LaunchRole launch_role(const LaunchFlags& f, const RankEnv& env) {
  const std::string n = std::to_string(f.world_size);
  if (f.world_size < 1)
    fail(ErrorKind::kInvalidArgument, "--tensor-parallel-size " + n + " must be at least 1");
  if (!env.launcher.empty()) {
    if (env.size != f.world_size)
      fail(ErrorKind::kInvalidArgument, "--tensor-parallel-size " + n + " needs " + n + " ranks, and " +
                                            env.launcher + " started " + std::to_string(env.size));
    return f.world_size == 1 ? LaunchRole::kSingle : LaunchRole::kLaunched;
  }
  if (f.nnodes > 1 || !f.dist_init_addr.empty()) {
    if (f.cpu)
      fail(ErrorKind::kUnsupported,
           "--nnodes / --dist-init-addr start CUDA ranks (NCCL); CPU ranks across machines run under mpirun "
           "or srun");
    if (f.nnodes > 1 && f.dist_init_addr.empty())
      fail(ErrorKind::kInvalidArgument,
           "--nnodes " + std::to_string(f.nnodes) + " needs --dist-init-addr HOST:PORT (rank 0's node)");
    if (f.nnodes < 1 || f.world_size % f.nnodes != 0)
      fail(ErrorKind::kInvalidArgument,
           "--tensor-parallel-size " + n + " does not split over --nnodes " + std::to_string(f.nnodes));
    if (f.node_rank < 0 || f.node_rank >= f.nnodes)
      fail(ErrorKind::kInvalidArgument, "--node-rank " + std::to_string(f.node_rank) +
                                            " is not below --nnodes " + std::to_string(f.nnodes));
    return LaunchRole::kSpawn;
  }
  return f.world_size == 1 ? LaunchRole::kSingle : LaunchRole::kSpawn;
}

void set_command_line(int argc, char** argv) {
  command_line().assign(argv, argv + argc);
}

void register_rank0_with_supervisor() {
  const char* path = std::getenv(kPidFileVar);
  if (path == nullptr || rank_env().rank != 0) return;
  const std::string tmp = std::string(path) + ".tmp";
  std::ofstream(tmp) << getpid() << "\n";
  std::rename(tmp.c_str(), path);
}

namespace {

// A port that was free a moment ago on 127.0.0.1 (rank 0 binds it right after).
int free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail(ErrorKind::kInternal, std::string("no free local port: ") + std::strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

[[noreturn]] void exec_or_die(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  std::fprintf(stderr, "m3: error: cannot run %s: %s\n", cargv[0], std::strerror(errno));
  std::_Exit(127);
}

int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

SpawnPlan spawn_plan(const LaunchFlags& f, SpawnVia via) {
  SpawnPlan p;
  p.via = via;
  p.world_size = f.world_size;
  p.count = f.world_size / std::max(1, f.nnodes);
  p.first_rank = f.node_rank * p.count;
  p.rendezvous = f.dist_init_addr;
  return p;
}

int spawn_local_ranks(const SpawnPlan& plan) {
  const int ranks = plan.count;
  const SpawnVia via = plan.via;
  const auto& args = command_line();
  M3_CHECK(!args.empty(), "set_command_line was not called");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char dir_template[] = "/tmp/m3-ranks-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) fail(ErrorKind::kInternal, "cannot create a directory in /tmp");
  const std::string dir = dir_template, pidfile = dir + "/rank0.pid";
  // The ranks share this machine's cores: split them unless the user chose.
  const int threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(ranks));
  const std::string rendezvous = via == SpawnVia::kMpirun ? std::string()
                                 : !plan.rendezvous.empty()
                                     ? plan.rendezvous
                                     : "127.0.0.1:" + std::to_string(free_local_port());
  log_info("starting ", ranks, " ranks on this machine", via == SpawnVia::kMpirun ? " under mpirun" : "",
           " (", threads, " OpenMP thread(s) each)");

  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&signals, s);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &signals, &old);

  std::vector<pid_t> children;  // kMpirun: mpirun; kDirect: rank i
  auto start = [&](const std::vector<std::string>& argv,
                   const std::vector<std::pair<std::string, std::string>>& env) {
    const pid_t child = fork();
    if (child < 0) fail(ErrorKind::kInternal, std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      setpgid(0, 0);  // a terminal's Ctrl-C reaches the supervisor only; it forwards to rank 0
      setenv(kPidFileVar, pidfile.c_str(), 1);
      setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 0);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      exec_or_die(argv);
    }
    children.push_back(child);
  };
  std::vector<std::string> rank_args(args.begin() + 1, args.end());
  rank_args.insert(rank_args.begin(), self);
  if (via == SpawnVia::kMpirun) {
    std::vector<std::string> argv = {find_mpirun(),     "-np",       std::to_string(ranks),
                                     "--oversubscribe", "--bind-to", "none"};
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), rank_args.begin(), rank_args.end());
    // Containers often forbid the cross-process memory reads Open MPI's shared-memory transport prefers.
    start(argv, {{"OMPI_MCA_btl_vader_single_copy_mechanism", "none"}});
  } else {
    for (int r = 0; r < ranks; ++r)
      start(rank_args, {{"M3_DIST_RANK", std::to_string(plan.first_rank + r)},
                        {"M3_DIST_WORLD_SIZE", std::to_string(plan.world_size)},
                        {"M3_DIST_LOCAL_RANK", std::to_string(r)},
                        {"M3_DIST_LOCAL_SIZE", std::to_string(ranks)},
                        {"M3_DIST_INIT_ADDR", rendezvous}});
  }

  int signals_seen = 0, result = 0;
  size_t running = children.size();
  bool failed = false;
  auto failed_at = std::chrono::steady_clock::now();
  while (running > 0) {
    const timespec tick{1, 0};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig < 0) {  // a second passed: ranks that outlive a failure by 10 s are killed
      if (failed && std::chrono::steady_clock::now() - failed_at > std::chrono::seconds(10))
        for (pid_t c : children)
          if (c > 0) kill(-c, SIGKILL);
      continue;
    }
    if (sig == SIGCHLD) {
      int status = 0;
      for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
        const auto it = std::find(children.begin(), children.end(), pid);
        if (it == children.end()) continue;
        --running;
        const int code = status_code(status);
        if (code != 0 && !failed) {  // the first failure ends the run
          failed = true;
          failed_at = std::chrono::steady_clock::now();
          result = code;
          if (via == SpawnVia::kDirect)
            log_error("rank ", plan.first_rank + (it - children.begin()), " (pid ", pid,
                      ") ended with status ", code, "; stopping the other ranks");
          for (pid_t other : children)
            if (other != pid) kill(-other, SIGTERM);
        }
        *it = -1;
      }
      continue;
    }
    pid_t rank0 = 0;
    std::ifstream(pidfile) >> rank0;
    if (++signals_seen == 1 && rank0 > 0) {
      log_info("signal ", sig, ": passing it to rank 0 (pid ", rank0, ")");
      kill(rank0, SIGTERM);
    } else {
      for (pid_t c : children)
        if (c > 0) kill(-c, signals_seen == 1 ? SIGTERM : SIGKILL);
    }
  }
  std::filesystem::remove_all(dir);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (result != 0) log_error("the ranks ended with status ", result);
  return result;
}

}  // namespace m3::dist
