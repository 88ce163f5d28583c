// Randomized end-to-end test: two PeerSessions back to back through a
// SessionPipe, driven by thousands of random engine, network and clock
// operations under fixed seeds.
//
// After every operation: no job has two results, every successful load's
// destination slots hold exactly the producer's bytes, and a freed slot was
// not written after its load's result (it still holds the poison written
// when it was freed). After every connection loss: every job of that
// connection has its result and no pin is left. At the end (all requests
// finished, timers run out, sessions closed): every job has exactly one
// result and nothing is pinned. A failure prints the seed, the step and the
// last operations.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>

#include "tests/session/random_simulation.h"

namespace kvpeer::session::testing {
namespace {

using random_test::Simulation;

TEST_CASE("randomized: two sessions keep every invariant under random operations", "[random]") {
  // KVPEER_RANDOM_SEED=n reruns one seed; KVPEER_RANDOM_SEEDS=n runs seeds 1..n.
  const char* one = std::getenv("KVPEER_RANDOM_SEED");
  const char* many = std::getenv("KVPEER_RANDOM_SEEDS");
  const uint64_t first = one ? std::strtoull(one, nullptr, 10) : 1;
  const uint64_t last = one ? first : (many ? std::strtoull(many, nullptr, 10) : 20);
  const int kSeeds = static_cast<int>(last - first + 1);
  constexpr int kOps = 2000;
  int sym = 0, pd = 0, failed = 0, reconnects = 0, late = 0;
  std::map<std::string, int> reasons;
  for (uint64_t seed = first; seed <= last; ++seed) {
    INFO("seed " << seed);
    Simulation sim(seed);
    sim.Run(kOps);
    sym += sim.successes_sym;
    pd += sim.successes_pd;
    failed += sim.failures;
    reconnects += sim.reconnects;
    for (auto& [r, c] : sim.close_reasons) reasons[r] += c;
    late += sim.late_frame_closes;
    for (auto& [r, c] : sim.failure_reasons) reasons["load failure: " + r] += c;
  }
  // The run must exercise the interesting paths, not just fail everything.
  CHECK(sym > 5 * kSeeds);
  CHECK(pd > 5 * kSeeds);
  CHECK(failed > 5 * kSeeds);
  CHECK(reconnects > kSeeds);
  WARN("randomized: " << sym << " symmetric and " << pd << " PD loads succeeded, " << failed << " failed, "
                      << reconnects << " reconnects, " << late << " closes on late block_data");
  for (auto& [r, c] : reasons) WARN("closed: " << r << " x" << c);
}

}  // namespace
}  // namespace kvpeer::session::testing
