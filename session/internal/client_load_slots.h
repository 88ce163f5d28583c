// LoadSlots: the destination slots of one inbound load, and which of them
// have landed.
//
// It is the client role's write guard (wire spec section 5, last rule): a
// block_data frame may only fill slots the load asked for and that have not
// been filled yet, each exactly once. Checking a frame and receiving its
// payload are two steps because the payload is read straight into the slots
// after the header was accepted; slots of an accepted frame are "in frame"
// until the payload has landed.
//
// Thread-safety: none; owned by one ClientRole.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"
#include "session/client_role.h"
#include "session/session_types.h"

namespace kvpeer::session {

class LoadSlots {
 public:
  LoadSlots(SlotSinkRef sink, std::vector<protocol::SlotIndex> indexes);

  // A destination index that appears more than once in the load, if any.
  // REQUIRES: checked before the load is used; such a load is invalid.
  std::optional<protocol::SlotIndex> duplicate() const { return duplicate_; }

  // Checks one block_data frame: every index must be a destination of this
  // load, not received yet, and not repeated within the frame. On success
  // fills `plan->targets` in frame order and holds the slots "in frame".
  // On failure nothing changes; the violation's message starts with
  // `context`.
  // REQUIRES: !frame_open().
  Status BeginFrame(const std::vector<protocol::SlotIndex>& frame, BlockDataPlan* plan, std::string_view context);
  // The payload of the open frame has landed: its slots count as received.
  void EndFrame();
  // The payload of the open frame will not land: its slots wait again.
  void DropFrame();
  // A header was accepted and its payload has not landed yet: the peer's
  // bytes may be going into the slots right now.
  bool frame_open() const { return !in_frame_.empty(); }

  size_t size() const { return state_.size(); }
  size_t received() const { return received_; }
  bool complete() const { return received_ == state_.size(); }
  // The destination memory is still there (SlotSink::Writable).
  bool writable() const { return sink_->Writable(); }
  // The checksum of a landed slot (SlotSink::LandedChecksum).
  std::optional<uint64_t> LandedChecksum(protocol::SlotIndex index) const { return sink_->LandedChecksum(index); }
  // The sink and the destination indexes in the load's order, to ask for
  // the same load again elsewhere (ClientRole::TakeUnservedWork).
  const SlotSinkRef& sink() const { return sink_; }
  std::vector<protocol::SlotIndex> indexes() const;
  // Where `index` is in the load's destination list (so in its keys).
  // REQUIRES: `index` is a destination of this load.
  size_t PositionOf(protocol::SlotIndex index) const { return position_.at(index); }

 private:
  enum class SlotState : uint8_t { kWaiting, kInFrame, kReceived };

  SlotSinkRef sink_;
  // Destination index -> position in state_; built once, so checking a frame
  // costs one hash lookup per block.
  std::unordered_map<protocol::SlotIndex, uint32_t> position_;
  std::vector<SlotState> state_;
  // Positions held by the open frame, so EndFrame touches only them.
  std::vector<uint32_t> in_frame_;
  size_t received_ = 0;
  std::optional<protocol::SlotIndex> duplicate_;
};

}  // namespace kvpeer::session
