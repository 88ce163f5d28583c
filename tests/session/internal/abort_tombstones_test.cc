// AbortTombstones bounded in number and in bytes (issue 11, finding 4): a
// peer picks how many rounds it aborts and how long their ids are, so the
// set of acked rounds must not grow with either.
#include <catch2/catch.hpp>

#include <string>

#include "protocol/limits.h"
#include "protocol/messages.h"
#include "session/internal/abort_tombstones.h"
#include "tests/session/server_harness.h"

namespace kvpeer::session::testing {
namespace {

using protocol::AbortAck;
using server_test::ServerHarness;

// A distinct id of the longest length the wire allows.
std::string LongId(int i) {
  std::string id = "abort-" + std::to_string(i) + "-";
  id.resize(protocol::kMaxStringChars, 'x');
  return id;
}

TEST_CASE("tombstones: long ids are bounded in bytes, oldest evicted first", "[server][tombstones]") {
  AbortTombstones tombstones;
  const uint64_t charge = protocol::kMaxStringChars + kTombstoneOverhead;
  const int fit = static_cast<int>(AbortTombstones::kDefaultMaxBytes / charge);
  for (int i = 0; i < 20000; ++i) tombstones.Insert({LongId(i), static_cast<protocol::RoundSeq>(i)});
  CHECK(tombstones.bytes() <= AbortTombstones::kDefaultMaxBytes);
  CHECK(tombstones.size() == static_cast<size_t>(fit));
  CHECK(tombstones.bytes() == tombstones.size() * charge);
  CHECK(tombstones.Contains({LongId(19999), 19999}));
  CHECK(tombstones.Contains({LongId(20000 - fit), 20000 - fit}));
  CHECK_FALSE(tombstones.Contains({LongId(19999 - fit), 19999 - fit}));
  CHECK_FALSE(tombstones.Contains({LongId(0), 0}));
}

TEST_CASE("tombstones: short ids are bounded by count", "[server][tombstones]") {
  AbortTombstones tombstones(/*max_entries=*/3);
  for (int i = 0; i < 5; ++i) tombstones.Insert({"kv", static_cast<protocol::RoundSeq>(i)});
  CHECK(tombstones.size() == 3);
  CHECK_FALSE(tombstones.Contains({"kv", 1}));
  CHECK(tombstones.Contains({"kv", 2}));
  CHECK(tombstones.bytes() == 3 * (2 + kTombstoneOverhead));
}

TEST_CASE("tombstones: erasing a request gives its bytes back; a repeat charges nothing", "[server][tombstones]") {
  AbortTombstones tombstones;
  tombstones.Insert({"a", 1});
  tombstones.Insert({"a", 1});
  tombstones.Insert({"a", 2});
  tombstones.Insert({"bb", 1});
  CHECK(tombstones.bytes() == 2 * (1 + kTombstoneOverhead) + (2 + kTombstoneOverhead));
  tombstones.EraseRequest("a");
  CHECK(tombstones.size() == 1);
  CHECK(tombstones.bytes() == 2 + kTombstoneOverhead);
  // Evicting after an erase still finds only live entries.
  AbortTombstones small(/*max_entries=*/1);
  small.Insert({"x", 1});
  small.EraseRequest("x");
  small.Insert({"y", 1});
  small.Insert({"z", 1});
  CHECK(small.size() == 1);
  CHECK(small.Contains({"z", 1}));
  CHECK(small.bytes() == 1 + kTombstoneOverhead);
}

TEST_CASE("tombstones: the newest entry stays even when it alone passes the byte bound", "[server][tombstones]") {
  AbortTombstones tombstones(/*max_entries=*/16, /*max_bytes=*/10);
  tombstones.Insert({"first", 1});
  tombstones.Insert({"second", 2});
  CHECK(tombstones.size() == 1);
  CHECK(tombstones.Contains({"second", 2}));
}

TEST_CASE("server: a flood of aborted rounds with long ids keeps the recent re-sent abort unanswered",
          "[server][tombstones]") {
  ServerHarness h;
  for (int i = 0; i < 2000; ++i) {
    const auto seq = static_cast<protocol::RoundSeq>(i);
    REQUIRE(h.Fetch(LongId(i), {1}, {0}, seq).ok());
    h.Abort(LongId(i), seq);
  }
  REQUIRE(h.log.Count<AbortAck>() == 2000);
  CHECK(h.role->TrackedRequests() == 0);
  CHECK(h.role->RoundsOpen() == 0);
  // The latest round's tombstone is kept: a re-sent abort gets no second ack.
  h.Abort(LongId(1999), 1999);
  CHECK(h.log.Count<AbortAck>() == 2000);
  // The oldest was evicted: its re-sent abort is answered again, harmlessly
  // (nothing is open for it), which only a misbehaving consumer can see.
  h.Abort(LongId(0), 0);
  CHECK(h.log.Count<AbortAck>() == 2001);
  CHECK(h.role->TrackedRequests() == 0);
}

}  // namespace
}  // namespace kvpeer::session::testing
