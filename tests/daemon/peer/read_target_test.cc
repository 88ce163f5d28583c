// ChooseReadTarget driven with plain calls: where each read of a
// PeerConnection goes (daemon/peer/read_target.h), and the sequence of
// targets through a control frame and a stream of data frames.
#include <catch2/catch.hpp>

#include <vector>

#include "daemon/peer/read_target.h"

namespace kvpeer::daemon {
namespace {

ReadTarget Plain(bool payload, bool discarding, bool last_had_payload) {
  return ChooseReadTarget({payload, true, discarding, last_had_payload});
}

ReadTarget Tls(bool payload, bool discarding, bool last_had_payload) {
  return ChooseReadTarget({payload, false, discarding, last_had_payload});
}

TEST_CASE("read target: plain TCP reads payload into its slot, reads ahead between payloads", "[read_target]") {
  CHECK(Plain(false, false, false) == ReadTarget::kReadAhead);
  CHECK(Plain(false, false, true) == ReadTarget::kDecoder);  // right after a payload: exact (bulk)
  CHECK(Plain(true, false, false) == ReadTarget::kSlot);
  CHECK(Plain(true, false, true) == ReadTarget::kSlot);
  CHECK(Plain(true, true, false) == ReadTarget::kSlot);  // a dropped payload still goes where the decoder says
}

TEST_CASE("read target: TLS stages kept payload and reads everything else exactly", "[read_target]") {
  CHECK(Tls(false, false, false) == ReadTarget::kDecoder);
  CHECK(Tls(false, false, true) == ReadTarget::kDecoder);
  CHECK(Tls(true, false, false) == ReadTarget::kStaging);
  CHECK(Tls(true, true, false) == ReadTarget::kDecoder);  // dropped: never staged
}

TEST_CASE("read target: a control frame, then a stream of data frames, on plain TCP", "[read_target]") {
  // (reading payload, the frame before had payload) for: a control frame's
  // read-ahead, a data frame's header and payload, the next data frame's
  // prefix and header, its payload, then the prefix after it.
  const std::vector<std::pair<bool, bool>> steps = {
      {false, false}, {true, false}, {false, true}, {true, true}, {false, true}};
  std::vector<ReadTarget> targets;
  for (const auto& [payload, last] : steps) targets.push_back(Plain(payload, false, last));
  CHECK(targets == std::vector<ReadTarget>{ReadTarget::kReadAhead, ReadTarget::kSlot, ReadTarget::kDecoder,
                                           ReadTarget::kSlot, ReadTarget::kDecoder});
}

TEST_CASE("read target: names", "[read_target]") {
  CHECK(ReadTargetName(ReadTarget::kNone) == "none");
  CHECK(ReadTargetName(ReadTarget::kSlot) == "slot");
  CHECK(ReadTargetName(ReadTarget::kReadAhead) == "read_ahead");
}

}  // namespace
}  // namespace kvpeer::daemon
