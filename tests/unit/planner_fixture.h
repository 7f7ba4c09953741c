#pragma once
// The planner tests' recorded inputs: tests/unit/planner_fixtures/{cluster,profile}.json, a model
// of round numbers (32² images, patch 8: 17 tokens; width 64, depth 5, 4 heads, MLP 128, 10
// classes; 181,642 parameters) whose costs the tests derive by hand.
#include <colo/planner/planner.h>

#include <string>

namespace planner_fixture {

inline std::string fixture_path(const std::string& name) {
  return std::string(COLO_SOURCE_DIR) + "/tests/unit/planner_fixtures/" + name;
}

inline colo::nn::ViTConfig fixture_model() {
  return colo::nn::ViTConfig().image_size(32).patch_size(8).embed_dim(64).depth(5).num_heads(4).mlp_ratio(2.0).num_classes(10);
}

inline colo::planner::PlanRequest fixture_request(int world, int64_t batch) {
  colo::planner::PlanRequest r;
  r.model = {"fixture", fixture_model()};
  r.world_size = world;
  r.global_batch = batch;
  r.precision = "fp32";
  r.cluster = colo::planner::read_cluster_file(fixture_path("cluster.json"));
  r.profile = colo::planner::read_profile_file(fixture_path("profile.json"));
  return r;
}

}  // namespace planner_fixture
