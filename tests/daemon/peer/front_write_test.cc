// FrontWriteAllowed driven with plain calls: when the writer's synchronous
// front end may write the queue's front (daemon/peer/front_write.h).
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "daemon/peer/front_write.h"

namespace kvpeer::daemon {
namespace {

class BytesPin : public session::PinnedBlock {
 public:
  std::span<const uint8_t> bytes() const override { return bytes_; }

 private:
  std::vector<uint8_t> bytes_ = std::vector<uint8_t>(16, 1);
};

WriteQueue ControlFirst() {
  WriteQueue queue;
  queue.Push(session::OutFrame{protocol::Ping{"p"}, {}});
  return queue;
}

WriteQueue DataFirst() {
  WriteQueue queue;
  protocol::BlockData data;
  data.kv_request_id = "r";
  data.block_indexes = {0};
  queue.Push(session::OutFrame{data, {std::make_shared<BytesPin>()}});
  queue.Push(session::OutFrame{protocol::Ping{"p"}, {}});
  return queue;
}

TEST_CASE("front write: a control frame at the front goes now on a running plain TCP connection", "[front_write]") {
  CHECK(FrontWriteAllowed(PeerPhase::kRunning, true, false, ControlFirst()));
}

TEST_CASE("front write: left to the writer coroutine otherwise", "[front_write]") {
  CHECK_FALSE(FrontWriteAllowed(PeerPhase::kRunning, false, false, ControlFirst()));  // TLS
  CHECK_FALSE(FrontWriteAllowed(PeerPhase::kRunning, true, true, ControlFirst()));    // a frame in flight
  CHECK_FALSE(FrontWriteAllowed(PeerPhase::kRunning, true, false, DataFirst()));      // data: torn-source handling
  CHECK_FALSE(FrontWriteAllowed(PeerPhase::kRunning, true, false, WriteQueue()));     // nothing to write
  for (PeerPhase phase : {PeerPhase::kIdle, PeerPhase::kResolving, PeerPhase::kConnecting, PeerPhase::kTlsHandshake,
                          PeerPhase::kLingering, PeerPhase::kClosed}) {
    CHECK_FALSE(FrontWriteAllowed(phase, true, false, ControlFirst()));
  }
}

}  // namespace
}  // namespace kvpeer::daemon
