// FlatParamGroup::init draws only the rank's shard: each rank's slice of every tensor equals the
// single-rank run's, whatever the world size, and the values are normal with the spec's std.
// defines: test cases [parallel][init]
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <unordered_set>
#include <vector>

#include "engine/parallel/flat_group.h"

using namespace odyssey;

namespace {

/// Two weights that span several 2^20-element initialisation chunks and a norm of ones between
/// them: 1.5M + 1000 + 2.3M elements, so ranks of 3 cut chunks in the middle.
std::vector<ParamSpec> specs() {
  return {ParamSpec{"w1", {1500, 1000}, true, 0.02}, ParamSpec{"norm", {1000}, false, 0.0},
          ParamSpec{"w2", {2300, 1000}, true, 0.5}};
}

/// The master shard of rank `rank` of `world` (FSDP sharding), initialised from `seed` with the
/// group's chunks numbered from `first_chunk`.
at::Tensor shard_of(int rank, int world, uint64_t seed, int64_t first_chunk = 0) {
  RankContext ctx;
  ctx.rank = rank;
  ctx.world_size = world;
  FlatGroupOptions options;
  options.fsdp = world > 1;
  auto group = std::make_unique<FlatParamGroup>("g", specs(), ctx, options);
  // w1's 1.5M elements in 2 chunks, w2's 2.3M in 3, the norm none: the next group's first chunk
  REQUIRE(group->init(seed, first_chunk) == first_chunk + 2 + 3);
  return group->master.detach().clone();
}

}  // namespace

TEST_CASE("flat group init: every rank's shard is the single-rank run's slice, at every world size",
          "[parallel][init]") {
  // Exact equality: each chunk's values come from its own generator whatever rank draws it (a rank
  // whose shard cuts a chunk draws it whole and keeps its part), and no arithmetic follows.
  const at::Tensor whole = shard_of(0, 1, 7);
  for (int world : {2, 3, 8}) {
    std::vector<at::Tensor> shards;
    for (int r = 0; r < world; ++r) shards.push_back(shard_of(r, world, 7));
    const at::Tensor joined = at::cat(shards);  // [padded]: the shards in rank order
    INFO("world " << world);
    REQUIRE(joined.numel() >= whole.numel());
    CHECK(at::equal(joined.narrow(0, 0, whole.numel()), whole));
  }
  CHECK_FALSE(at::equal(shard_of(0, 1, 8), whole));  // another seed, other weights
}

TEST_CASE("flat group init: normal weights with the spec's std, chunk by chunk, and norms of ones",
          "[parallel][init]") {
  const at::Tensor w = shard_of(0, 1, 11).to(at::kDouble);
  const int64_t n1 = 1500 * 1000, n2 = 2300 * 1000;
  const at::Tensor w1 = w.narrow(0, 0, n1), norm = w.narrow(0, n1, 1000), w2 = w.narrow(0, n1 + 1000, n2);
  CHECK(at::equal(norm, at::ones_like(norm)));
  // Sample mean and std of n normal draws: standard errors std/sqrt(n) and std/sqrt(2n); 6 of
  // each bound them (a false failure about once in 5e8 runs), whatever CPU draws them.
  for (auto [x, sigma] : {std::pair{w1, 0.02}, std::pair{w2, 0.5}}) {
    const double n = static_cast<double>(x.numel());
    CHECK(std::abs(x.mean().item<double>()) < 6 * sigma / std::sqrt(n));
    CHECK(std::abs(x.std().item<double>() / sigma - 1) < 6 / std::sqrt(2 * n));
  }
  // The chunks are independent streams, not one stream repeated: w2's first two chunks differ.
  const int64_t chunk = int64_t{1} << 20;
  CHECK_FALSE(at::equal(w2.narrow(0, 0, 1000), w2.narrow(0, chunk, 1000)));
}

TEST_CASE("flat group init: every chunk of a model has its own generator seed", "[parallel][init]") {
  // ATen's CPU generator keeps 32 bits of its seed: the chunks' seeds are a bijection of their
  // model-wide numbers, so none repeats below 2^32 chunks (the 8B has 7.7k, a 32B 31k). Checked
  // over the first 2^20 numbers, and for two run seeds.
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}}) {
    std::unordered_set<uint32_t> seen;
    for (int64_t chunk = 0; chunk < (int64_t{1} << 20); ++chunk) seen.insert(init_chunk_seed(seed, chunk));
    CHECK(seen.size() == (size_t{1} << 20));
  }
  CHECK(init_chunk_seed(0, 7) != init_chunk_seed(42, 7));
  // A group whose chunks are numbered after another's draws other values than the first group.
  CHECK_FALSE(at::equal(shard_of(0, 1, 7, 5), shard_of(0, 1, 7, 0)));
}
