#include "daemon/peer/write_queue.h"

#include <algorithm>

#include "protocol/frame.h"

namespace kvpeer::daemon {

namespace {

uint64_t PayloadBytes(const session::OutFrame& frame) {
  uint64_t total = 0;
  for (const auto& block : frame.blocks) total += block->bytes().size();
  return total;
}

}  // namespace

bool HeadWritten(QueuedFrame& queued, size_t& n) {
  const size_t left = queued.head.size() - queued.written;
  if (n < left) {
    queued.written += n;
    n = 0;
    return false;
  }
  n -= left;
  queued.written = queued.head.size();
  return true;
}

void WriteQueue::Push(session::OutFrame frame) {
  std::string head = protocol::EncodeFrame(frame.message, PayloadBytes(frame));
  bytes_ += head.size();
  bytes_peak_ = std::max(bytes_peak_, bytes_);
  frames_.push_back(QueuedFrame{std::move(frame), std::move(head)});
}

QueuedFrame WriteQueue::PopData() {
  QueuedFrame queued = std::move(frames_.front());
  frames_.pop_front();
  bytes_ -= queued.head.size();
  return queued;
}

void WriteQueue::TakeControlBatch(std::vector<QueuedFrame>& batch, bool session_over) {
  batch.clear();
  size_t batch_bytes = 0;
  while (!frames_.empty() && batch.size() < kMaxGatheredFrames && !frames_.front().is_data()) {
    if (session_over && frames_.front().written == 0) break;
    batch_bytes += frames_.front().head.size();
    if (!batch.empty() && batch_bytes > kMaxBatchBytes) break;
    bytes_ -= frames_.front().head.size();
    batch.push_back(std::move(frames_.front()));
    frames_.pop_front();
    if (session_over) break;  // only the frame begun is finished
  }
}

void WriteQueue::GatherControlFront(std::vector<boost::asio::const_buffer>& buffers) const {
  buffers.clear();
  for (const QueuedFrame& queued : frames_) {
    if (queued.is_data() || buffers.size() == kMaxGatheredFrames) break;
    buffers.emplace_back(queued.head.data() + queued.written, queued.head.size() - queued.written);
  }
}

void WriteQueue::ConsumeFront(size_t n, const std::function<void(const QueuedFrame&)>& sent) {
  while (n > 0 && !frames_.empty() && HeadWritten(frames_.front(), n)) {
    sent(frames_.front());
    bytes_ -= frames_.front().head.size();
    frames_.pop_front();
  }
}

void WriteQueue::KeepForLinger() {
  std::erase_if(frames_, [](const QueuedFrame& queued) {
    return queued.written == 0 && !std::holds_alternative<protocol::Disconnect>(queued.frame.message);
  });
  Recount();
}

void WriteQueue::Clear() {
  frames_.clear();
  bytes_ = 0;
}

bool WriteQueue::FailTransferDone(const std::string& kv_request_id, protocol::RoundSeq round_seq) {
  bool failed = false;
  for (QueuedFrame& queued : frames_) {
    auto* done = std::get_if<protocol::TransferDone>(&queued.frame.message);
    if (done == nullptr || queued.written != 0 || !done->success || done->kv_request_id != kv_request_id ||
        done->round_seq != round_seq) {
      continue;
    }
    done->success = false;
    queued.head = protocol::EncodeFrame(queued.frame.message, 0);
    failed = true;
  }
  Recount();
  return failed;
}

void WriteQueue::Recount() {
  bytes_ = 0;
  for (const QueuedFrame& queued : frames_) bytes_ += queued.head.size();
}

}  // namespace kvpeer::daemon
