#include "protocol/frame_decoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvpeer::protocol {
namespace {

// Discarded payload bytes land here, so skipping a 64 MiB payload costs
// 64 KiB of memory, not 64 MiB.
constexpr size_t kDiscardChunk = 64 * 1024;
// First allocation for a header or a buffered payload. Later growth doubles:
// copying stays O(bytes), and a peer that announces a large section and then
// stalls costs about what it actually sent, not what it announced.
constexpr size_t kInitialChunk = 4 * 1024;
// Buffers above this are released between frames, so one large frame does
// not pin its memory for the rest of the connection.
constexpr size_t kRetainedCapacity = 64 * 1024;

size_t GrownSize(size_t current, uint64_t total) {
  const uint64_t wanted = std::max<uint64_t>(kInitialChunk, uint64_t{2} * current);
  return static_cast<size_t>(std::min(total, wanted));
}

std::span<uint8_t> AsBytes(std::string& text) { return {reinterpret_cast<uint8_t*>(text.data()), text.size()}; }

// Appends room for more payload to `buffer` (at most up to `total` bytes)
// and returns that room.
std::span<uint8_t> GrowPayloadBuffer(std::vector<uint8_t>& buffer, uint64_t total) {
  const size_t old_size = buffer.size();
  buffer.resize(GrownSize(old_size, total));
  return std::span<uint8_t>(buffer).subspan(old_size);
}

template <typename Buffer>
void ClearAndTrim(Buffer& buffer) {
  if (buffer.capacity() > kRetainedCapacity) {
    Buffer().swap(buffer);
  } else {
    buffer.clear();
  }
}

}  // namespace

FrameDecoder::FrameDecoder(DecodeContext context) : context_(context) {}

// Payload modes share the targets_ machinery:
//   scatter  targets_ = the caller's non-empty spans, adding up to payload_len;
//   buffer   targets_ = the unfilled tail of buffered_payload_; when it is
//            full and payload remains, the buffer grows and the new tail
//            becomes the target (scatter targets never run out early, so
//            running out early means buffer mode);
//   discard  targets_ empty; bytes go to discard_scratch_ and are dropped.
std::span<uint8_t> FrameDecoder::WritableSpan() {
  switch (state_) {
    case State::kReadingPrefix:
      return std::span<uint8_t>(prefix_bytes_).subspan(filled_);
    case State::kReadingHeader:
      if (filled_ == header_.size()) header_.resize(GrownSize(header_.size(), prefix_.header_len));
      return AsBytes(header_).subspan(filled_);
    case State::kReadingPayload: {
      if (targets_.empty()) {
        const uint64_t remaining = prefix_.payload_len - payload_received_;
        return std::span<uint8_t>(discard_scratch_).first(std::min<uint64_t>(remaining, discard_scratch_.size()));
      }
      if (target_index_ == targets_.size()) {
        targets_ = {GrowPayloadBuffer(buffered_payload_, prefix_.payload_len)};
        target_index_ = 0;
        target_offset_ = 0;
      }
      return targets_[target_index_].subspan(target_offset_);
    }
    default:
      return {};
  }
}

void FrameDecoder::WritableSpans(size_t max_spans, std::vector<std::span<uint8_t>>* out) {
  out->clear();
  if (max_spans == 0) return;
  const std::span<uint8_t> first = WritableSpan();
  if (first.empty()) return;
  out->push_back(first);
  if (state_ != State::kReadingPayload || !scatter_) return;
  for (size_t i = target_index_ + 1; i < targets_.size() && out->size() < max_spans; ++i) out->push_back(targets_[i]);
}

// The most one Commit may count: a scatter payload's rest may arrive in one
// vectored read; every other section only in what WritableSpan() offered.
size_t FrameDecoder::CommitLimit() {
  if (state_ == State::kReadingPayload && scatter_) return prefix_.payload_len - payload_received_;
  return WritableSpan().size();
}

void FrameDecoder::AdvanceTargets(size_t n) {
  while (n > 0 && target_index_ < targets_.size()) {
    const size_t step = std::min(n, targets_[target_index_].size() - target_offset_);
    target_offset_ += step;
    n -= step;
    if (target_offset_ == targets_[target_index_].size()) {
      ++target_index_;
      target_offset_ = 0;
    }
  }
}

void FrameDecoder::Commit(size_t n) {
  if (n == 0) return;
  const bool late_read = state_ == State::kReadingPayload && targets_.empty() &&
                         n <= prefix_.payload_len - payload_received_;  // see DiscardRestOfPayload
  if (n > CommitLimit() && !late_read) {
    return Fail(
        Status::Internal("FrameDecoder::Commit: " + std::to_string(n) + " bytes is more than WritableSpan() offered"));
  }
  switch (state_) {
    case State::kReadingPrefix:
      filled_ += n;
      if (filled_ == kPrefixLen) OnPrefixComplete();
      return;
    case State::kReadingHeader:
      filled_ += n;
      if (filled_ == prefix_.header_len) OnHeaderComplete();
      return;
    case State::kReadingPayload:
      payload_received_ += n;
      AdvanceTargets(n);  // none in discard mode
      if (payload_received_ == prefix_.payload_len) OnPayloadComplete();
      return;
    default:
      return;  // unreachable: WritableSpan() is empty in every other state
  }
}

void FrameDecoder::ReceivePayloadInto(std::vector<std::span<uint8_t>> targets) {
  if (state_ != State::kHeaderReady) {
    return Fail(Status::Internal("FrameDecoder::ReceivePayloadInto called outside kHeaderReady"));
  }
  // Empty spans would stall the cursor; they hold nothing anyway.
  std::erase_if(targets, [](std::span<uint8_t> target) { return target.empty(); });
  uint64_t total = 0;
  for (const std::span<uint8_t> target : targets) {
    // Compared against what is left, so the sum can never overflow.
    if (target.size() > prefix_.payload_len - total) {
      return Fail(Status::Internal("FrameDecoder::ReceivePayloadInto: targets exceed payload_len " +
                                   std::to_string(prefix_.payload_len)));
    }
    total += target.size();
  }
  if (total != prefix_.payload_len) {
    return Fail(Status::Internal("FrameDecoder::ReceivePayloadInto: targets hold " + std::to_string(total) +
                                 " bytes, payload_len is " + std::to_string(prefix_.payload_len)));
  }
  targets_ = std::move(targets);
  scatter_ = true;
  state_ = State::kReadingPayload;
}

void FrameDecoder::DiscardPayload() {
  if (state_ != State::kHeaderReady) {
    return Fail(Status::Internal("FrameDecoder::DiscardPayload called outside kHeaderReady"));
  }
  // Allocated once and kept: unknown frames may recur on a connection.
  if (discard_scratch_.empty()) discard_scratch_.resize(kDiscardChunk);
  targets_.clear();
  scatter_ = false;
  state_ = State::kReadingPayload;
}

void FrameDecoder::DiscardRestOfPayload() {
  if (state_ != State::kReadingPayload) {
    return Fail(Status::Internal("FrameDecoder::DiscardRestOfPayload called outside kReadingPayload"));
  }
  if (discard_scratch_.empty()) discard_scratch_.resize(kDiscardChunk);
  targets_.clear();
  scatter_ = false;
  target_index_ = 0;
  target_offset_ = 0;
}

void FrameDecoder::BufferPayload() {
  if (state_ != State::kHeaderReady) {
    return Fail(Status::Internal("FrameDecoder::BufferPayload called outside kHeaderReady"));
  }
  buffered_payload_.clear();
  // A non-empty first target marks buffer mode (see WritableSpan).
  targets_ = {GrowPayloadBuffer(buffered_payload_, prefix_.payload_len)};
  scatter_ = false;
  state_ = State::kReadingPayload;
}

void FrameDecoder::NextFrame() {
  if (state_ != State::kFrameReady) {
    return Fail(Status::Internal("FrameDecoder::NextFrame called outside kFrameReady"));
  }
  filled_ = 0;
  ClearAndTrim(header_);
  ClearAndTrim(buffered_payload_);
  state_ = State::kReadingPrefix;
}

size_t FrameDecoder::Feed(std::span<const uint8_t> bytes) {
  size_t consumed = 0;
  while (consumed < bytes.size()) {
    const std::span<uint8_t> room = WritableSpan();
    if (room.empty()) break;  // kHeaderReady, kFrameReady or kFailed: the caller acts first
    const size_t n = std::min(room.size(), bytes.size() - consumed);
    std::memcpy(room.data(), bytes.data() + consumed, n);
    consumed += n;
    Commit(n);
  }
  return consumed;
}

void FrameDecoder::Fail(Status status) {
  if (state_ == State::kFailed) return;  // the first error is the one that explains the close
  error_ = std::move(status);
  state_ = State::kFailed;
  targets_.clear();  // never write into caller memory after failing
  scatter_ = false;
}

void FrameDecoder::SetMaxLengths(uint32_t max_header_len, uint64_t max_payload_len) {
  max_header_len_ = std::min(max_header_len, kMaxHeaderLen);
  max_payload_len_ = std::min(max_payload_len, kMaxPayloadLen);
}

void FrameDecoder::OnPrefixComplete() {
  Status status = DecodePrefix(prefix_bytes_, &prefix_);
  if (!status.ok()) return Fail(std::move(status));
  // Only tighter limits than the protocol's get here, and today only the
  // handshake sets them: the reason says so, for the operator's log.
  if (prefix_.header_len > max_header_len_) {
    return Fail(Status::FieldViolation("header_len", "must be at most " + std::to_string(max_header_len_) +
                                                         " before the connection is ready, got " +
                                                         std::to_string(prefix_.header_len)));
  }
  if (prefix_.payload_len > max_payload_len_) {
    return Fail(Status::FieldViolation("payload_len", "must be at most " + std::to_string(max_payload_len_) +
                                                          " before the connection is ready, got " +
                                                          std::to_string(prefix_.payload_len)));
  }
  filled_ = 0;
  header_.clear();
  state_ = State::kReadingHeader;
}

void FrameDecoder::OnHeaderComplete() {
  Status status = DecodeHeader(header_, prefix_.payload_len, context_, &message_);
  if (!status.ok()) return Fail(std::move(status));
  targets_.clear();
  scatter_ = false;
  target_index_ = 0;
  target_offset_ = 0;
  payload_received_ = 0;
  state_ = prefix_.payload_len == 0 ? State::kFrameReady : State::kHeaderReady;
}

void FrameDecoder::OnPayloadComplete() {
  targets_.clear();  // the caller's spans may not outlive this frame
  scatter_ = false;
  state_ = State::kFrameReady;
}

}  // namespace kvpeer::protocol
