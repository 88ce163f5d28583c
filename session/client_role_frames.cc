// ClientRole: inbound block_data (which slots a frame's payload goes to,
// its checksums once landed, and a frame whose load ended meanwhile).
#include <optional>
#include <utility>

#include "protocol/codec.h"
#include "session/client_role.h"
#include "session/internal/client_role_impl.h"

namespace kvpeer::session {
namespace {

using client_detail::HexPrefix;
using client_detail::Load;
using client_detail::Phase;
using protocol::Key;
using protocol::RoundSeq;

constexpr char kSlotsUnmapped[] = "a destination slot is no longer mapped (engine region truncated?)";

}  // namespace

Status ClientRole::OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan) {
  plan->discard = false;
  plan->targets.clear();
  if (impl_->closed) return Status::Unavailable("the session to " + impl_->peer_id + " is closed");
  if (impl_->checksums && !message.xxh3.valid()) {
    // Even for a frame we would drop: the peer broke the negotiated format.
    if (message.xxh3.state == protocol::BlockChecksums::State::kAbsent) {
      return Status::FieldViolation("block_data.xxh3", "is required while the xxh3 feature is on");
    }
    return Status::Violation("block_data." + message.xxh3.problem);
  }
  const std::string context =
      "block_data for kv_request_id " + message.kv_request_id + " round " + std::to_string(message.round_seq) + ": ";
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  if (load == nullptr) return Status::Violation(context + "no load of this round is in flight");
  if (load->slots.frame_open()) return Status::Internal(context + "header before the previous payload landed");
  if (load->phase == Phase::kAborting) {
    // The peer may have sent it before it saw our abort_fetch.
    plan->discard = true;
    return Status::Ok();
  }
  if (message.block_indexes.empty()) return Status::Violation(context + "no block index");
  if (!load->slots.writable()) {
    // The engine truncated its region: the load fails and this frame is
    // dropped; the connection and its other loads carry on.
    impl_->EndLoadLocally(message.round_seq, *load, {JobFailure::kSlotsUnmapped, kSlotsUnmapped}, impl_->clock());
    plan->discard = true;
    return Status::Ok();
  }
  Status status = load->slots.BeginFrame(message.block_indexes, plan, context);
  if (status.ok()) impl_->open_frame_round = message.round_seq;
  return status;
}

void ClientRole::OnBlockDataComplete(const protocol::BlockData& message) {
  Load* load = impl_->FindLoad(message.kv_request_id, message.round_seq);
  if (load == nullptr || !load->slots.frame_open()) return;  // a discarded or abandoned frame
  impl_->open_frame_round.reset();
  std::optional<FailureReport> failure = impl_->CheckLanded(message, *load);
  if (failure) {
    // The slots hold the bytes now, so the failure is reported at once.
    load->slots.DropFrame();
    if (load->phase == Phase::kInFlight)
      impl_->EndLoadLocally(message.round_seq, *load, std::move(*failure), impl_->clock());
  } else {
    load->slots.EndFrame();
  }
  impl_->AfterFrame(message.round_seq, *load);
}

// Why the landed frame must not count (a block whose bytes do not match what
// the producer hashed, or slots whose memory is gone), or nullopt.
std::optional<FailureReport> ClientRole::Impl::CheckLanded(const protocol::BlockData& message, Load& load) {
  if (!checksums) return std::nullopt;
  for (size_t i = 0; i < message.block_indexes.size(); ++i) {
    const protocol::SlotIndex index = message.block_indexes[i];
    const std::optional<uint64_t> landed = load.slots.LandedChecksum(index);
    if (!landed) return FailureReport{JobFailure::kSlotsUnmapped, kSlotsUnmapped};
    const uint64_t expected = message.xxh3.values[i];
    if (*landed == expected) continue;
    const Key& key = load.keys[load.slots.PositionOf(index)];
    checksum_failures.push_back(ChecksumFailure{load.kv_request_id, key, index, expected, *landed});
    return FailureReport{JobFailure::kChecksum,
                         "checksum mismatch on block " + std::to_string(index) + " (key " + HexPrefix(key) +
                             "): the peer sent xxh3 " + protocol::ChecksumHex(expected) +
                             ", the bytes that landed hash to " + protocol::ChecksumHex(*landed)};
  }
  return std::nullopt;
}

void ClientRole::EnableChecksums() { impl_->checksums = true; }

std::vector<ChecksumFailure> ClientRole::TakeChecksumFailures() { return std::exchange(impl_->checksum_failures, {}); }

bool ClientRole::OpenFrameAbandoned() const {
  if (!impl_->open_frame_round) return false;
  const Load& load = impl_->loads.at(*impl_->open_frame_round);
  return load.deferred_failure.has_value() || load.retire_after_frame;
}

void ClientRole::FailOpenFrame(const std::string& reason) {
  if (!impl_->open_frame_round) return;
  const RoundSeq round = *impl_->open_frame_round;
  Load& load = impl_->loads.at(round);
  if (load.phase == Phase::kInFlight) {
    impl_->EndLoadLocally(round, load, {JobFailure::kSlotsUnmapped, reason}, impl_->clock());
  }
  AbandonOpenFrame();
}

void ClientRole::AbandonOpenFrame() {
  if (!OpenFrameAbandoned()) return;
  const RoundSeq round = *std::exchange(impl_->open_frame_round, std::nullopt);
  Load& load = impl_->loads.at(round);
  load.slots.DropFrame();
  impl_->AfterFrame(round, load);
}

// The open frame of `load` is over (landed or abandoned): what waited for it
// happens now.
void ClientRole::Impl::AfterFrame(RoundSeq round, Load& load) {
  if (load.deferred_failure) {
    FailureReport failure = std::move(*load.deferred_failure);
    load.deferred_failure.reset();
    EmitFailure(load, std::move(failure));
  }
  if (load.retire_after_frame) Retire(round);
}

}  // namespace kvpeer::session
