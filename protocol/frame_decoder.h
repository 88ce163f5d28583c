// Incremental frame decoder.
//
// Bytes arrive in arbitrary chunks, one byte at a time included. The decoder
// is a pull parser: WritableSpan() says where the next incoming bytes must go
// and Commit() says how many arrived there. That lets the caller receive a
// block_data payload straight into its destination memory: once a header is
// decoded (kHeaderReady) the caller inspects message() and chooses where the
// payload goes (ReceivePayloadInto, DiscardPayload or BufferPayload).
// Feed() is a push-style convenience over the same machinery for callers
// that already hold the bytes (tests, fuzzing, a read-ahead buffer).
//
// After kFailed the decoder stays failed: error() names the violation and the
// connection must be closed.
//
// Thread-safety: none; one decoder belongs to one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/codec.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "base/status.h"

namespace kvpeer::protocol {

class FrameDecoder {
 public:
  enum class State {
    kReadingPrefix,
    kReadingHeader,
    kHeaderReady,  // message() and payload_len() are valid; choose a payload destination
    kReadingPayload,
    kFrameReady,  // a whole frame is in; call NextFrame() to start the next one
    kFailed,      // error() says why
  };

  explicit FrameDecoder(DecodeContext context = {});

  State state() const { return state_; }

  // Tighter length limits for the frames still to come (wire spec section 2:
  // 64 KiB of header and no payload before the connection is ready). Checked
  // on the 16-byte prefix, before a header byte is buffered, so a peer
  // announcing a 16 MiB header is refused having cost 16 bytes. The caller
  // sets them before each frame (a frame already past its prefix keeps the
  // limits it was checked against). Defaults: the protocol's maxima.
  void SetMaxLengths(uint32_t max_header_len, uint64_t max_payload_len);
  const Status& error() const { return error_; }

  // Where the next incoming bytes go. Non-empty in kReadingPrefix,
  // kReadingHeader and kReadingPayload; empty in every other state.
  std::span<uint8_t> WritableSpan();
  // Where the next incoming bytes go, as spans in order, appended to `out`
  // (cleared first; at most `max_spans`): in a scatter payload
  // (ReceivePayloadInto) the rest of the current target and the targets
  // after it, otherwise WritableSpan() alone. One vectored read can then
  // fill several destination slots: a payload of many small blocks costs a
  // system call per read, not one per block.
  void WritableSpans(size_t max_spans, std::vector<std::span<uint8_t>>* out);
  // REQUIRES: n <= WritableSpan().size(), or in a scatter payload n <= the
  // total of what WritableSpans() offered.
  void Commit(size_t n);

  // Valid in kHeaderReady, kReadingPayload and kFrameReady.
  const Message& message() const { return message_; }
  uint64_t payload_len() const { return prefix_.payload_len; }
  // Payload bytes still to come in kReadingPayload (0 in other states).
  uint64_t payload_remaining() const {
    return state_ == State::kReadingPayload ? prefix_.payload_len - payload_received_ : 0;
  }

  // REQUIRES: state() == kHeaderReady. The payload is scattered over
  // `targets` in order; their sizes must add up to payload_len(), otherwise
  // the decoder fails with an internal error.
  void ReceivePayloadInto(std::vector<std::span<uint8_t>> targets);
  // REQUIRES: state() == kHeaderReady. The payload is read and dropped.
  void DiscardPayload();
  // REQUIRES: state() == kReadingPayload. What is left of the payload is
  // read and dropped: its targets are never written again. The next
  // Commit may still count up to the rest of the payload, for a read that
  // was already under way into the old target.
  void DiscardRestOfPayload();
  // The payload being read is dropped (DiscardPayload, DiscardRestOfPayload):
  // its bytes go to scratch memory, not to any target.
  bool discarding_payload() const { return state_ == State::kReadingPayload && targets_.empty(); }
  // REQUIRES: state() == kHeaderReady. The payload is kept; see payload().
  void BufferPayload();
  // The buffered payload (BufferPayload), valid in kFrameReady.
  std::span<const uint8_t> payload() const { return buffered_payload_; }

  // REQUIRES: state() == kFrameReady.
  void NextFrame();

  // Copies bytes into WritableSpan()/Commit() until they run out or the
  // decoder reaches kHeaderReady, kFrameReady or kFailed. Returns the number
  // of bytes consumed; the caller feeds the rest after acting on the state.
  size_t Feed(std::span<const uint8_t> bytes);

 private:
  void Fail(Status status);
  void OnPrefixComplete();
  void OnHeaderComplete();
  void OnPayloadComplete();
  size_t CommitLimit();
  void AdvanceTargets(size_t n);

  DecodeContext context_;
  uint32_t max_header_len_ = kMaxHeaderLen;
  uint64_t max_payload_len_ = kMaxPayloadLen;
  State state_ = State::kReadingPrefix;
  Status error_;
  uint8_t prefix_bytes_[kPrefixLen] = {};
  size_t filled_ = 0;  // bytes of the current section received so far
  FramePrefix prefix_;
  std::string header_;
  Message message_;
  std::vector<std::span<uint8_t>> targets_;
  bool scatter_ = false;  // targets_ are the caller's (ReceivePayloadInto), not the buffer's tail
  size_t target_index_ = 0;
  size_t target_offset_ = 0;
  std::vector<uint8_t> buffered_payload_;
  std::vector<uint8_t> discard_scratch_;
  uint64_t payload_received_ = 0;
};

}  // namespace kvpeer::protocol
