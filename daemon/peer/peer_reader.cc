#include "daemon/peer/peer_reader.h"

#include <algorithm>
#include <string>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/node/shm_region.h"
#include "daemon/peer/peer_connection.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using State = protocol::FrameDecoder::State;

PeerReader::PeerReader(PeerConnection& connection, PeerStream& stream, uint64_t block_len)
    : connection_(connection),
      stream_(stream),
      decoder_(protocol::DecodeContext{block_len}),
      wake_(stream.socket().get_executor()) {}

asio::awaitable<void> PeerReader::Run() {
  auto self = connection_.shared_from_this();
  while (!connection_.session_over()) {
    const uint64_t queued = connection_.writer_.queue().bytes();
    if (max_queued_bytes_ != 0 && queued > max_queued_bytes_) {
      co_await WaitForQueueToDrain();
      continue;
    }
    const Step step = co_await ReadOnce();
    if (step == Step::kEnded) co_return;
    if (step == Step::kStop) break;
    if (step == Step::kAgain) continue;
    if (!ProcessDecoderState()) break;
  }
  if (connection_.phase_.lingering()) co_await DiscardUntilPeerCloses();
}

// Wire spec section 2: before ready a frame may carry at most 64 KiB of
// header and no payload; the decoder refuses more from the prefix.
void PeerReader::SetLimitsForNextFrame() {
  if (decoder_.state() != State::kReadingPrefix) return;
  const session::PeerSession& session = *connection_.session_;
  decoder_.SetMaxLengths(session.MaxInboundHeaderLen(), session.MaxInboundPayloadLen());
}

// Every read goes exactly where the decoder wants its next bytes (the
// prefix, the header, or the payload's destination slot) or, between
// payloads on plain TCP, into the read-ahead buffer (ChooseReadTarget). On
// plain TCP no payload byte is copied in user space, so an engine that
// shrinks its region under a load makes the kernel fail the read (EFAULT)
// instead of the daemon faulting (SIGBUS). Under TLS the payload is
// decrypted in user space: into the staging buffer, never into a mapping a
// truncation could pull away, and into the slot only a whole piece at a
// time (OnStagedBytes).
asio::awaitable<PeerReader::Step> PeerReader::ReadOnce() {
  SetLimitsForNextFrame();
  const bool payload = decoder_.state() == State::kReadingPayload;
  const ReadTarget target = ChooseReadTarget({.reading_payload = payload,
                                              .zero_copy = stream_.zero_copy(),
                                              .discarding_payload = decoder_.discarding_payload(),
                                              .last_frame_had_payload = last_frame_had_payload_});
  stream_.SetReceiveLowWater(decoder_.payload_remaining());
  const std::span<const asio::mutable_buffer> into = ReadBuffers(target);
  in_flight_ = target;
  // The slot lets DivertAbandonedFrame take a pending read back from a slot
  // whose load has ended.
  boost::system::error_code ec;
  const size_t n = co_await stream_.async_read_some(
      into, asio::bind_cancellation_slot(read_cancel_.slot(), asio::redirect_error(asio::use_awaitable, ec)));
  in_flight_ = ReadTarget::kNone;
  last_read_at_ = std::chrono::steady_clock::now();
  session::PeerSession& session = *connection_.session_;
  if (connection_.session_over()) co_return Step::kStop;
  if (std::exchange(read_diverted_, false) && ec == asio::error::operation_aborted) co_return Step::kAgain;
  if (ec == boost::system::errc::bad_address && target == ReadTarget::kSlot) {
    // The kernel refused to copy into the slot and left the bytes in the
    // socket: only this load fails; the rest of its frame is dropped.
    session.FailOpenFrame("a destination slot is no longer mapped (engine region truncated?)");
    decoder_.DiscardRestOfPayload();
    connection_.AfterSessionActivity();
    co_return Step::kAgain;
  }
  if (ec) {
    connection_.CloseSocketAndSession(session::CloseCause::kConnectionLost, ec == asio::error::eof
                                                                                ? "peer closed the connection"
                                                                                : "connection lost: " + ec.message());
    co_return Step::kEnded;
  }
  bytes_received_ += n;
  if (target == ReadTarget::kReadAhead) {
    co_return FeedReadAhead(std::span<const uint8_t>(read_ahead_.data(), n)) ? Step::kAgain : Step::kStop;
  }
  if (target == ReadTarget::kStaging) {
    OnStagedBytes(n);
  } else {
    decoder_.Commit(n);
  }
  // A slow but moving data frame is not silence; a dribbled header is. (The
  // load timeout still bounds the load: a trickle keeps the session, not
  // its loads.)
  if (payload) session.NoteBytesReceived();
  co_return Step::kDecode;
}

// Where a read of `target` puts its bytes. A payload read on plain TCP
// takes as many of the frame's destination slots as the decoder names (up
// to kMaxReadSpans): one system call, one wake-up and one acknowledgement
// for what the low-water mark let gather, instead of one for every block.
std::span<const asio::mutable_buffer> PeerReader::ReadBuffers(ReadTarget target) {
  size_t count = 1;
  if (target == ReadTarget::kSlot) {
    decoder_.WritableSpans(kMaxReadSpans, &read_spans_);
    count = read_spans_.size();
    for (size_t i = 0; i < count; ++i) read_buffers_[i] = asio::buffer(read_spans_[i].data(), read_spans_[i].size());
  } else if (target == ReadTarget::kStaging) {
    const std::span<uint8_t> room = staging_.Room(decoder_.WritableSpan());
    read_buffers_[0] = asio::buffer(room.data(), room.size());
  } else if (target == ReadTarget::kReadAhead) {
    read_buffers_[0] = asio::buffer(read_ahead_);
  } else {
    const std::span<uint8_t> wanted = decoder_.WritableSpan();
    read_buffers_[0] = asio::buffer(wanted.data(), wanted.size());
  }
  return std::span<const asio::mutable_buffer>(read_buffers_.data(), count);
}

// The frames in one read are decoded and acted on in order, each under the
// limits the session sets for it (the first frames may be the handshake).
// Payload bytes that came with a header are placed into their slot through
// the region's descriptor (PlaceReadAhead), never through the mapping.
bool PeerReader::FeedReadAhead(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    if (connection_.session_over()) return false;
    SetLimitsForNextFrame();
    const bool into_slot = decoder_.state() == State::kReadingPayload && !decoder_.discarding_payload();
    const size_t used = into_slot ? PlaceReadAhead(bytes) : decoder_.Feed(bytes);
    bytes = bytes.subspan(used);
    if (!ProcessDecoderState()) return false;
  }
  return true;
}

size_t PeerReader::PlaceReadAhead(std::span<const uint8_t> bytes) {
  session::PeerSession& session = *connection_.session_;
  const std::span<uint8_t> slot = decoder_.WritableSpan();
  const size_t n = std::min(slot.size(), bytes.size());
  session.NoteBytesReceived();
  const bool placed = ShmRegion::WriteMapped(slot.data(), bytes.first(n));
  if (!placed) {
    session.FailOpenFrame("a destination slot is no longer backed by its file (engine region truncated?)");
    decoder_.DiscardRestOfPayload();  // these bytes count as a late read of the dropped rest
  }
  decoder_.Commit(n);
  if (!placed) connection_.AfterSessionActivity();
  return n;
}

void PeerReader::OnStagedBytes(size_t n) {
  switch (staging_.Add(n)) {
    case BlockStaging::Arrival::kPartial:
      return;
    case BlockStaging::Arrival::kDiscarded:
      // The frame was dropped while the read was pending (its load ended:
      // DivertAbandonedFrame): the bytes go nowhere, so no slot is written
      // after its load's result; they count as a late read of the rest.
      decoder_.Commit(n);
      return;
    case BlockStaging::Arrival::kWhole:
      break;
  }
  const std::span<uint8_t> destination = staging_.Destination();
  const bool placed = ShmRegion::WriteMapped(destination.data(), staging_.Bytes());
  staging_.Clear();
  if (!placed) {
    connection_.session_->FailOpenFrame(
        "a destination slot is no longer backed by its file (engine region truncated?)");
    decoder_.DiscardRestOfPayload();  // the piece counts as a late read of the dropped rest
  }
  decoder_.Commit(destination.size());
  if (!placed) connection_.AfterSessionActivity();
}

// Bytes below the low-water mark wake no one: on a link slower than the
// mark per liveness period, or one that stalled, they would sit unread and
// the peer would look silent. After kLowWaterPatience without a read, any
// waiting bytes are taken (the mark drops to 1; the next read raises it).
void PeerReader::ReadBytesBelowLowWater() {
  constexpr auto kLowWaterPatience = std::chrono::milliseconds(500);
  if (stream_.receive_low_water() <= 1 || std::chrono::steady_clock::now() - last_read_at_ < kLowWaterPatience) return;
  boost::system::error_code ec;
  if (stream_.socket().available(ec) == 0 || ec) return;
  stream_.SetReceiveLowWater(1);  // the kernel wakes the pending read at once
}

// Reading only what the writer can answer keeps a peer that sends lookups
// but never reads our answers from growing the queue without bound: its
// frames wait in the kernel's buffers, then in its own.
asio::awaitable<void> PeerReader::WaitForQueueToDrain() {
  paused_ = true;
  connection_.listener_.OnLimitHit(connection_, "max-queued-bytes", 1,
                                   "stopped reading: " + std::to_string(connection_.writer_.queue().bytes()) +
                                       " bytes wait to be written (max-queued-bytes " +
                                       std::to_string(max_queued_bytes_) + "); the peer is not reading what we send");
  while (!connection_.session_over() && connection_.writer_.queue().bytes() > max_queued_bytes_ / 2) {
    boost::system::error_code ec;
    wake_.expires_at(asio::steady_timer::time_point::max());
    co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  paused_ = false;
}

void PeerReader::OnQueueShrunk(uint64_t queued_bytes) {
  if (paused_ && queued_bytes <= max_queued_bytes_ / 2) wake_.cancel();
}

bool PeerReader::ProcessDecoderState() {
  session::PeerSession& session = *connection_.session_;
  for (;;) {
    switch (decoder_.state()) {
      case State::kFailed:
        session.Close(session::CloseCause::kMalformedFrame, decoder_.error().message(), true);
        connection_.NoteViolation(nullptr);
        connection_.AfterSessionActivity();
        return false;
      case State::kHeaderReady:
        if (!OnHeaderReady()) return false;
        break;
      case State::kFrameReady:
        OnFrameReady();
        if (connection_.session_over() || session.state() == session::PeerSession::State::kClosed) {
          connection_.AfterSessionActivity();
          return false;
        }
        break;
      default:
        return true;
    }
  }
}

bool PeerReader::OnHeaderReady() {
  const auto* block_data = std::get_if<protocol::BlockData>(&decoder_.message());
  if (block_data == nullptr) {  // an unknown type's payload: skipped
    decoder_.DiscardPayload();
    return true;
  }
  session::BlockDataPlan plan;
  Status status = connection_.session_->OnBlockDataHeader(*block_data, &plan);
  if (!status.ok()) {
    connection_.NoteViolation(&decoder_.message());
    connection_.AfterSessionActivity();
    return false;
  }
  if (plan.discard) {
    decoder_.DiscardPayload();
  } else {
    decoder_.ReceivePayloadInto(std::move(plan.targets));
  }
  return decoder_.state() != State::kFailed || ProcessDecoderState();
}

void PeerReader::OnFrameReady() {
  session::PeerSession& session = *connection_.session_;
  ConnectionListener& listener = connection_.listener_;
  const auto& message = decoder_.message();
  last_frame_had_payload_ = decoder_.payload_len() > 0;
  connection_.CountReceived(message);
  const uint64_t refused = session.RoundsRefused();
  if (const auto* block_data = std::get_if<protocol::BlockData>(&message)) {
    session.OnBlockDataComplete(*block_data);
  } else if (Status status = session.OnMessage(message); !status.ok()) {
    connection_.NoteViolation(&message);
  } else if (std::holds_alternative<protocol::LookupResp>(message)) {
    listener.OnLookupResp(connection_);
  }
  if (const uint64_t now_refused = session.RoundsRefused(); now_refused != refused) {
    const bool lookup = std::holds_alternative<protocol::Lookup>(message);
    listener.OnLimitHit(connection_, "max-rounds-per-peer", now_refused - refused,
                        std::string(lookup ? "answered a lookup all-miss" : "failed a fetch") + ": " +
                            std::to_string(session.RoundsOpen()) + " rounds are open for this peer");
  }
  decoder_.NextFrame();
  connection_.AfterSessionActivity();
}

// A load ended (timeout, finish) while its frame's payload was arriving:
// the rest of that payload is read and dropped, so the load's result can be
// reported now rather than when a stalled link finally delivers the frame.
// Over TLS the pending read goes to the staging buffer, not the slot: the
// staged piece is dropped (what it held and what the read still brings
// count as read and discarded), so the read need not be taken back.
void PeerReader::DivertAbandonedFrame() {
  if (connection_.session_over() || !connection_.session_->OpenFrameAbandoned()) return;
  if (decoder_.state() != State::kReadingPayload) return;
  if (reading_into_slot()) {
    // Single-threaded: the read is queued in the reactor, not running, so
    // cancelling it means no byte of it reaches the slot from now on. A read
    // that already completed landed before the result is reported.
    read_diverted_ = true;
    read_cancel_.emit(asio::cancellation_type::total);
  }
  const size_t staged = staging_.Drop();
  decoder_.DiscardRestOfPayload();
  decoder_.Commit(staged);  // fewer than the payload still owes: a piece is never whole here
  connection_.session_->AbandonOpenFrame();
}

// A lingering connection reads and drops what the peer still sends until it
// closes too: closing with unread bytes would make the kernel send a reset,
// which can destroy our disconnect before the peer reads it.
asio::awaitable<void> PeerReader::DiscardUntilPeerCloses() {
  auto self = connection_.shared_from_this();
  stream_.SetReceiveLowWater(1);  // every byte, and the EOF, wakes the drain
  std::vector<char> scratch(16 * 1024);
  while (connection_.phase_.lingering()) {
    boost::system::error_code ec;
    co_await stream_.async_read_some(asio::buffer(scratch), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  connection_.EndLinger();
}

}  // namespace kvpeer::daemon
