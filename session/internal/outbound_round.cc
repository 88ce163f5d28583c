#include "session/internal/outbound_round.h"

#include <algorithm>

namespace kvpeer::session {

bool OutboundRound::AddSymmetricDemand(const std::vector<protocol::Key>& keys,
                                       const std::vector<protocol::SlotIndex>& dests) {
  has_demand = true;
  std::unordered_map<protocol::Key, PinRef> pins = std::move(probed);
  probed.clear();
  // One search per key; nothing is queued unless every key was probed.
  std::vector<const PinRef*> found;
  found.reserve(keys.size());
  for (const protocol::Key& key : keys) {
    auto it = pins.find(key);
    if (it == pins.end()) return false;
    found.push_back(&it->second);
  }
  for (size_t i = 0; i < keys.size(); ++i) queue.push_back(QueuedBlock{dests[i], *found[i], std::nullopt});
  return true;
}

void OutboundRound::AddPdDemand(const std::vector<protocol::Key>& keys, const std::vector<protocol::SlotIndex>& dests) {
  has_demand = true;
  for (size_t i = 0; i < keys.size(); ++i) unmatched[keys[i]].push_back(dests[i]);
}

size_t OutboundRound::Offer(const protocol::Key& key, const PinRef& pin, std::optional<JobId> job) {
  auto it = unmatched.find(key);
  if (it == unmatched.end()) return 0;
  for (protocol::SlotIndex dest : it->second) queue.push_back(QueuedBlock{dest, pin, job});
  const size_t queued = it->second.size();
  unmatched.erase(it);
  return queued;
}

std::vector<QueuedBlock> OutboundRound::TakeBatch(size_t max_blocks) {
  const size_t count = std::min(queue.size(), std::max<size_t>(max_blocks, 1));
  std::vector<QueuedBlock> batch(std::make_move_iterator(queue.begin()),
                                 std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(count)));
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(count));
  return batch;
}

bool OutboundRound::NextBatchReadable(size_t max_blocks) const {
  const size_t count = std::min(queue.size(), std::max<size_t>(max_blocks, 1));
  return std::all_of(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(count),
                     [](const QueuedBlock& block) { return block.pin->Readable(); });
}

std::optional<std::vector<uint64_t>> OutboundRound::NextBatchChecksums(size_t max_blocks) const {
  const size_t count = std::min(queue.size(), std::max<size_t>(max_blocks, 1));
  std::vector<uint64_t> checksums;
  checksums.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    std::optional<uint64_t> checksum = queue[i].pin->Checksum();
    if (!checksum) return std::nullopt;
    checksums.push_back(*checksum);
  }
  return checksums;
}

}  // namespace kvpeer::session
