// SessionPipe: an in-memory connection wiring two PeerSessions back to back.
//
// Each side's SendFn appends to that side's outgoing FIFO; Step() delivers
// the oldest frame of one side to the other (control frames through
// OnMessage, block_data through OnBlockDataHeader, a copy of the source
// blocks' bytes into the plan's targets, then OnBlockDataComplete), and when
// a side has nothing queued it asks that side for its next data frame, as
// the daemon's writer does. Frames can be round-tripped through the codec so
// that whatever a session sends is checked to be valid on the wire.
//
// Connection semantics follow TCP: once a side's session has closed, the
// frames it sent before closing still arrive, then the other side sees the
// connection end (a kConnectionLost close, "connection lost", without a
// disconnect); frames sent to a closed session are dropped.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <span>
#include <deque>
#include <string>
#include <vector>

#include "protocol/codec.h"
#include "session/peer_session.h"
#include "session/session_types.h"

namespace kvpeer::session::testing {

class SessionPipe {
 public:
  enum Side { kA = 0, kB = 1 };

  explicit SessionPipe(uint64_t block_len, bool round_trip_codec = true)
      : block_len_(block_len), round_trip_(round_trip_codec) {}

  SendFn SendFrom(Side side) {
    return [this, side](OutFrame frame) { outbox_[side].push_back(std::move(frame)); };
  }

  // Connects `session` as `side`. Its frames must go through SendFrom(side).
  void Attach(Side side, PeerSession* session) {
    sessions_[side] = session;
    eof_delivered_[side] = false;
  }

  // Drops every frame in flight (a torn-down connection).
  void Reset() {
    for (auto& box : outbox_) box.clear();
    sessions_ = {nullptr, nullptr};
  }

  // One unit of progress on the stream from `from`: deliver its oldest
  // frame, or let it produce a data frame when nothing is queued, or deliver
  // the end of the connection once it has closed. Returns whether anything
  // happened.
  bool Step(Side from) {
    PeerSession* sender = sessions_[from];
    PeerSession* receiver = sessions_[Other(from)];
    if (sender == nullptr || receiver == nullptr) return false;
    if (!outbox_[from].empty()) {
      OutFrame frame = std::move(outbox_[from].front());
      outbox_[from].pop_front();
      if (receiver->state() != PeerSession::State::kClosed) Deliver(frame, *receiver);
      return true;
    }
    if (sender->state() == PeerSession::State::kClosed) return DeliverEof(from, *receiver);
    // A pull may release store results without sending anything; that is
    // progress too (HasDataToSend() was true).
    const bool had_data = sender->HasDataToSend();
    return sender->ProduceDataFrame() || had_data;
  }

  // Steps both directions until nothing moves. Returns the number of steps.
  size_t Pump(size_t max_steps = 1000000) {
    size_t steps = 0;
    for (bool moved = true; moved && steps < max_steps;) {
      moved = false;
      for (Side side : {kA, kB}) {
        if (Step(side)) {
          moved = true;
          ++steps;
        }
      }
    }
    return steps;
  }

  // Whether Delivered() keeps a copy of every message (off for long runs).
  void set_record(bool record) { record_ = record; }
  // Called on each block of a payload after it landed, before the receiver
  // is told: a test flips bytes "in flight" here.
  void set_payload_tamper(std::function<void(std::span<uint8_t>)> tamper) { tamper_ = std::move(tamper); }

  size_t Queued(Side from) const { return outbox_[from].size(); }
  std::deque<OutFrame>& Outbox(Side from) { return outbox_[from]; }
  // Every message delivered to `to`, in order.
  const std::vector<protocol::Message>& Delivered(Side to) const { return delivered_[to]; }
  void ClearDelivered() {
    for (auto& d : delivered_) d.clear();
  }

  static Side Other(Side side) { return side == kA ? kB : kA; }

 private:
  bool DeliverEof(Side from, PeerSession& receiver) {
    if (eof_delivered_[from]) return false;
    eof_delivered_[from] = true;
    receiver.Close(CloseCause::kConnectionLost, "connection lost", /*notify_peer=*/false);
    return true;
  }

  // What the receiving daemon would decode from the bytes.
  protocol::Message OverTheWire(const OutFrame& frame) {
    if (!round_trip_) return frame.message;
    const uint64_t payload_len = frame.blocks.size() * block_len_;
    protocol::Message decoded;
    const Status status = protocol::DecodeHeader(protocol::EncodeHeader(frame.message), payload_len,
                                                 protocol::DecodeContext{block_len_}, &decoded);
    INFO("a session sent a frame the codec rejects: " << status.message());
    REQUIRE(status.ok());
    return decoded;
  }

  void Deliver(const OutFrame& frame, PeerSession& receiver) {
    protocol::Message message = OverTheWire(frame);
    if (record_) delivered_[&receiver == sessions_[kA] ? kA : kB].push_back(message);
    if (const auto* data = std::get_if<protocol::BlockData>(&message)) {
      DeliverBlockData(*data, frame, receiver);
    } else {
      REQUIRE(frame.blocks.empty());
      (void)receiver.OnMessage(message);
    }
  }

  void DeliverBlockData(const protocol::BlockData& data, const OutFrame& frame, PeerSession& receiver) {
    REQUIRE(frame.blocks.size() == data.block_indexes.size());
    BlockDataPlan plan;
    if (!receiver.OnBlockDataHeader(data, &plan).ok()) return;  // closed on a violation
    if (!plan.discard) {
      REQUIRE(plan.targets.size() == frame.blocks.size());
      for (size_t i = 0; i < plan.targets.size(); ++i) {
        const std::span<const uint8_t> source = frame.blocks[i]->bytes();
        REQUIRE(source.size() == block_len_);
        REQUIRE(plan.targets[i].size() == block_len_);
        std::memcpy(plan.targets[i].data(), source.data(), block_len_);
        if (tamper_) tamper_(plan.targets[i]);
      }
    }
    receiver.OnBlockDataComplete(data);
  }

  uint64_t block_len_;
  bool round_trip_;
  bool record_ = true;
  std::function<void(std::span<uint8_t>)> tamper_;
  std::array<std::deque<OutFrame>, 2> outbox_;
  std::array<PeerSession*, 2> sessions_{nullptr, nullptr};
  std::array<bool, 2> eof_delivered_{false, false};
  std::array<std::vector<protocol::Message>, 2> delivered_;
};

}  // namespace kvpeer::session::testing
