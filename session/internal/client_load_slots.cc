#include "session/internal/client_load_slots.h"

#include <string>
#include <utility>

namespace kvpeer::session {

LoadSlots::LoadSlots(SlotSinkRef sink, std::vector<protocol::SlotIndex> indexes)
    : sink_(std::move(sink)), state_(indexes.size(), SlotState::kWaiting) {
  position_.reserve(indexes.size());
  for (uint32_t pos = 0; pos < indexes.size(); ++pos) {
    if (!position_.emplace(indexes[pos], pos).second && !duplicate_) duplicate_ = indexes[pos];
  }
}

std::vector<protocol::SlotIndex> LoadSlots::indexes() const {
  std::vector<protocol::SlotIndex> in_order(state_.size());
  for (const auto& [index, pos] : position_) in_order[pos] = index;
  return in_order;
}

Status LoadSlots::BeginFrame(const std::vector<protocol::SlotIndex>& frame, BlockDataPlan* plan,
                             std::string_view context) {
  auto fail = [&](protocol::SlotIndex index, const char* why) {
    // Undo the frame's marks so a rejected frame leaves no trace.
    for (uint32_t pos : in_frame_) state_[pos] = SlotState::kWaiting;
    in_frame_.clear();
    plan->targets.clear();
    return Status::Violation(std::string(context) + "index " + std::to_string(index) + why);
  };
  plan->targets.clear();
  plan->targets.reserve(frame.size());
  for (protocol::SlotIndex index : frame) {
    auto it = position_.find(index);
    if (it == position_.end()) return fail(index, " was not requested");
    SlotState& slot = state_[it->second];
    if (slot == SlotState::kReceived) return fail(index, " was already received");
    if (slot == SlotState::kInFrame) return fail(index, " appears twice in the frame");
    slot = SlotState::kInFrame;
    in_frame_.push_back(it->second);
    plan->targets.push_back(sink_->Slot(index));
  }
  return Status::Ok();
}

void LoadSlots::EndFrame() {
  for (uint32_t pos : in_frame_) state_[pos] = SlotState::kReceived;
  received_ += in_frame_.size();
  in_frame_.clear();
}

void LoadSlots::DropFrame() {
  for (uint32_t pos : in_frame_) state_[pos] = SlotState::kWaiting;
  in_frame_.clear();
}

}  // namespace kvpeer::session
