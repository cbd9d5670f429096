// Launcher environments and the launch decision: which rank a process is, and when the flags and the
// launcher disagree.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "dist/launch.h"

namespace m3::dist {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(RankEnv, NoLauncherIsOneRank) {
  const RankEnv e = rank_env_from(env_of({}));
  EXPECT_EQ(e.launcher, "");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.size, 1);
}

TEST(RankEnv, OpenMpi) {
  const RankEnv e = rank_env_from(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                          {"OMPI_COMM_WORLD_SIZE", "8"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  const RankEnv spawned = rank_env_from(env_of({{"M3_DIST_RANK", "2"},
                                                {"M3_DIST_WORLD_SIZE", "4"},
                                                {"M3_DIST_LOCAL_RANK", "0"},
                                                {"M3_DIST_INIT_ADDR", "10.0.0.1:29500"}}));
  EXPECT_EQ(spawned.launcher, "m3");
  EXPECT_EQ(spawned.rank, 2);
  EXPECT_EQ(spawned.local_rank, 0);
  EXPECT_EQ(spawned.rendezvous, "10.0.0.1:29500");
  EXPECT_EQ(rank_env_from(env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                  {"M3_SUPERVISOR_PIDFILE", "/tmp/x"}}))
                .launcher,
            "m3");
}

TEST(RankEnv, SlurmTaskButNotTheBatchScript) {
  const RankEnv task = rank_env_from(env_of({{"SLURM_STEP_ID", "0"},
                                             {"SLURM_PROCID", "5"},
                                             {"SLURM_STEP_NUM_TASKS", "8"},
                                             {"SLURM_NTASKS", "16"},
                                             {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(task.launcher, "srun");
  EXPECT_EQ(task.rank, 5);
  EXPECT_EQ(task.size, 8);
  EXPECT_EQ(task.local_rank, 1);
  // An sbatch script has SLURM_PROCID / SLURM_NTASKS but is not one of the step's tasks.
  EXPECT_EQ(rank_env_from(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}})).launcher, "");
}

TEST(RankEnv, Pmi) {
  const RankEnv e = rank_env_from(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}}));
  EXPECT_EQ(e.launcher, "pmi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.size, 4);
}

TEST(RankEnv, MalformedValuesAreNamed) {
  try {
    rank_env_from(env_of({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rank_env_from(env_of({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}})), Error);
}

TEST(LaunchRole, Decisions) {
  LaunchFlags f;
  EXPECT_EQ(launch_role(f, {}), LaunchRole::kSingle);
  f.world_size = 4;
  EXPECT_EQ(launch_role(f, {}), LaunchRole::kSpawn);
  EXPECT_EQ(launch_role(f, {"mpirun", 2, 4, 0, 4, ""}), LaunchRole::kLaunched);
  f.world_size = 1;
  EXPECT_EQ(launch_role(f, {"mpirun", 0, 1, 0, 1, ""}), LaunchRole::kSingle);
}

TEST(LaunchRole, LauncherAndFlagMustAgree) {
  LaunchFlags f;
  f.world_size = 4;
  try {
    launch_role(f, {"mpirun", 0, 2, 0, 2, ""});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--tensor-parallel-size 4 needs 4 ranks, and mpirun started 2");
  }
  f.world_size = 0;
  EXPECT_THROW(launch_role(f, {}), Error);
}

TEST(LaunchRole, NodesWithoutALauncherSpawnTheirShareOfTheRanks) {
  LaunchFlags f;
  f.world_size = 8;
  f.nnodes = 2;
  f.node_rank = 1;
  f.dist_init_addr = "head:5000";
  EXPECT_EQ(launch_role(f, {}), LaunchRole::kSpawn);
  const SpawnPlan p = spawn_plan(f, SpawnVia::kDirect);
  EXPECT_EQ(p.first_rank, 4);
  EXPECT_EQ(p.count, 4);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.rendezvous, "head:5000");
  auto refused = [&](LaunchFlags g, const std::string& needle) {
    try {
      launch_role(g, {});
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  LaunchFlags no_addr = f;
  no_addr.dist_init_addr.clear();
  refused(no_addr, "needs --dist-init-addr");
  LaunchFlags uneven = f;
  uneven.nnodes = 3;
  refused(uneven, "does not split over --nnodes 3");
  LaunchFlags past = f;
  past.node_rank = 2;
  refused(past, "--node-rank 2 is not below --nnodes 2");
  LaunchFlags cpu = f;
  cpu.cpu = true;
  refused(cpu, "CPU ranks across machines run under mpirun or srun");
}

}  // namespace
}  // namespace m3::dist
