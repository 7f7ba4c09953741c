// core/dist pieces that need no second process: environment parsing, mesh layout, a world of one.
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <colo/files/files.h>
#include <map>
#include <string>

namespace colo::dist {
namespace {

Environment parse(const std::map<std::string, std::string>& vars) {
  return Environment::from_lookup([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Environment, NoLauncherIsAJobOfOne) {
  const auto env = parse({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.launcher, "none");
  EXPECT_FALSE(env.is_distributed());
}

TEST(Environment, TorchrunVariables) {
  const auto env = parse({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                          {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}, {"TORCHELASTIC_RUN_ID", "x"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node7");
  EXPECT_EQ(env.master_port, 1234);
  EXPECT_EQ(env.launcher, "torchrun");
}

TEST(Environment, ColoRunAndRendezvousFile) {
  const auto env = parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
                          {"COLO_LAUNCHER", "colo-run"}, {"COLO_RDZV_FILE", "/tmp/x"}});
  EXPECT_EQ(env.launcher, "colo-run");
  EXPECT_EQ(env.rdzv_file, "/tmp/x");
}

TEST(Environment, Slurm) {
  const auto env = parse({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "gpu07");
}

TEST(Environment, OpenMpi) {
  const auto env = parse({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                          {"MASTER_ADDR", "head"}});
  EXPECT_EQ(env.launcher, "openmpi");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 3);
  EXPECT_EQ(env.master_addr, "head");
}

TEST(Environment, MalformedValuesNameTheVariable) {
  try {
    parse({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    FAIL() << "accepted RANK=one";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='one'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), std::invalid_argument);
  EXPECT_THROW(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}), std::invalid_argument);
}

TEST(ProcessGroupMesh, ResolveInfersDataParallelSize) {
  const auto s = ProcessGroupMesh::resolve(dp_pp_tp_shape(0, 2, 2), 8);
  EXPECT_EQ(s[0].size, 2);
  EXPECT_THROW(ProcessGroupMesh::resolve(dp_pp_tp_shape(0, 3, 1), 8), std::invalid_argument);
  EXPECT_THROW(ProcessGroupMesh::resolve(dp_pp_tp_shape(4, 2, 2), 8), std::invalid_argument);
  EXPECT_THROW(ProcessGroupMesh::resolve(dp_pp_tp_shape(1, 0, 1), 8), std::invalid_argument);
}

std::shared_ptr<ProcessGroup> world_of_one() {
  const auto path = colo::files::join(colo::files::temp_directory(), "colo_unit_store_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  Environment env;
  env.rdzv_file = path;
  ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return init_world(env, options);
}

TEST(ProcessGroup, WorldOfOneRunsEveryCollective) {
  auto world = world_of_one();
  EXPECT_EQ(world->size(), 1);
  auto t = torch::tensor({1.0, 2.0});
  world->all_reduce(t, ReduceOp::kAvg).wait();
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.0, 2.0})));
  auto out = torch::zeros({2});
  world->reduce_scatter(out, torch::tensor({3.0f, 4.0f})).wait();
  EXPECT_TRUE(torch::equal(out, torch::tensor({3.0f, 4.0f})));
  world->all_gather(out, torch::tensor({5.0f, 6.0f})).wait();
  EXPECT_TRUE(torch::equal(out, torch::tensor({5.0f, 6.0f})));
  EXPECT_THROW(world->all_gather(torch::zeros({3}), torch::zeros({2})), std::invalid_argument);
  world->barrier().wait();
}

TEST(Work, DefaultWorkHasNothingToWaitFor) {
  Work work;  // what a collective skipped in a world of one leaves behind
  work.wait();
  work.wait();
  EXPECT_TRUE(work.is_completed());
}

TEST(ProcessGroupMesh, WorldOfOne) {
  auto world = world_of_one();
  ProcessGroupMesh mesh(world, dp_pp_tp_shape(1, 1, 1));
  EXPECT_EQ(mesh.group(MeshAxis::kTp)->size(), 1);
  EXPECT_EQ(mesh.group(MeshAxis::kDp)->size(), 1);
  EXPECT_EQ(mesh.axis_ranks(MeshAxis::kPp, 0), std::vector<int>{0});
  EXPECT_EQ(mesh.group(MeshAxis::kDp), world) << "an axis over the whole world is the world group";
  EXPECT_STREQ(MeshAxis::kTp, "tp");
}

// Four named axes and two sets in a world of one: every group is the world; a set not declared
// at construction is refused by name, single axes and the set of all axes need no declaration.
TEST(ProcessGroupMesh, GroupsOverSetsOfNamedAxes) {
  auto world = world_of_one();
  ProcessGroupMesh mesh(world, {{"dp", 0}, {"pp", 1}, {"tp", 1}, {"cp", 1}}, {{"tp", "cp"}, {"cp", "dp"}});
  EXPECT_EQ(mesh.describe(), "dp=1 pp=1 tp=1 cp=1");
  EXPECT_EQ(mesh.group("cp"), world);
  EXPECT_EQ(mesh.group_over({"cp", "tp"}), world);
  EXPECT_EQ(mesh.group_over({"dp", "cp"}), world);
  EXPECT_EQ(mesh.group_over({"pp"}), mesh.group("pp"));
  EXPECT_EQ(mesh.group_over({"cp", "tp", "pp", "dp"}), world);
  EXPECT_EQ(mesh.coordinate(), (MeshCoordinate{0, 0, 0, 0}));
  EXPECT_EQ(mesh.coordinate("cp"), 0);
  try {
    mesh.group_over({"dp", "tp"});
    ADD_FAILURE() << "an undeclared set was answered";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no group over {dp,tp}"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("axis_sets"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mesh.group("ep"), std::invalid_argument);
  EXPECT_THROW(ProcessGroupMesh(world, dp_pp_tp_shape(1, 1, 1), {{"dp", "ep"}}), std::invalid_argument);
}

}  // namespace
}  // namespace colo::dist
