#include "daemon/peer/peer_connection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "base/host_port.h"
#include "daemon/peer/outgoing_frame.h"
#include "daemon/node/shm_region.h"
#include "protocol/frame.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Ticks run at least this often so liveness and timeouts never drift far.
constexpr auto kMaxTickInterval = std::chrono::milliseconds(200);
// How long a closed connection keeps its socket open for the disconnect to
// follow a frame still being written and for the peer to close its side
// (Linger).
constexpr auto kMaxLinger = std::chrono::seconds(1);
// Lookups awaiting their lookup_resp for the round-trip histogram; a peer
// that never answers cannot grow this beyond the bound.
constexpr size_t kMaxLookupsAwaiting = 4096;
// Small frames go out at once. (How much bulk data may wait unsent is
// SendLowWater's.)
void TunePeerSocket(tcp::socket& socket) { socket.set_option(tcp::no_delay(true)); }

bool IsDataFrame(const session::OutFrame& frame) { return std::holds_alternative<protocol::BlockData>(frame.message); }

uint64_t PayloadBytes(const session::OutFrame& frame) {
  uint64_t total = 0;
  for (const auto& block : frame.blocks) total += block->bytes().size();
  return total;
}

}  // namespace

PeerConnection::PeerConnection(PeerStream stream, session::SessionConfig config, session::PublishedBlocks& index,
                               std::string expected_peer_id, ConnectionListener& listener)
    : stream_(std::move(stream)),
      socket_(stream_.socket()),
      index_(index),
      listener_(listener),
      decoder_(protocol::DecodeContext{config.block_len}),
      reader_wake_(socket_.get_executor()),
      writer_wake_(socket_.get_executor()),
      tick_timer_(socket_.get_executor()) {
  writer_wake_.expires_at(asio::steady_timer::time_point::max());
  liveness_timeout_ = config.liveness_timeout;
  if (stream_.authenticates_peer()) {
    config.identity_check = [this](const std::string& peer_id) { return CheckIdentity(peer_id); };
  }
  session::SendFn send = [this](session::OutFrame frame) { Enqueue(std::move(frame)); };
  session_ = std::make_unique<session::PeerSession>(
      std::move(config), [] { return std::chrono::steady_clock::now(); }, std::move(send), index_,
      std::move(expected_peer_id));
}

PeerConnection::~PeerConnection() = default;

// Wire spec section 5, "With TLS": the certificate must name the host of
// the peer_id the peer claims, whichever side dialled.
Status PeerConnection::CheckIdentity(const std::string& peer_id) const {
  const std::optional<HostPort> claimed = ParseHostPort(peer_id);
  if (!claimed) return Status::Violation("peer_id " + peer_id + " has no host");
  return stream_.IdentityMismatch(claimed->host);
}

std::string PeerConnection::remote_address() const {
  if (!remote_.empty()) return remote_;
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  if (ec) return "unknown";
  return FormatHostPort({endpoint.address().to_string(), endpoint.port()});
}

void PeerConnection::StartAccepted() {
  remote_ = remote_address();
  TunePeerSocket(socket_);
  session_->Start();
  if (stream_.needs_handshake()) {
    // Our connect waits in the queue until the TLS handshake is done; the
    // tick loop runs from now on so the handshake deadline covers it.
    phase_.Enter(PeerPhase::kTlsHandshake);
    StartTickLoop();
    auto self = shared_from_this();
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->AcceptTls(); }, asio::detached);
    return;
  }
  StartLoops();
  StartTickLoop();
  AfterSessionActivity();
}

asio::awaitable<void> PeerConnection::AcceptTls() {
  auto self = shared_from_this();
  boost::system::error_code ec;
  co_await stream_.Handshake(asio::ssl::stream_base::server, ec);
  if (closed()) co_return;
  if (ec) {
    CloseSocketAndSession(session::CloseCause::kTls, "TLS handshake failed: " + ec.message());
    co_return;
  }
  StartLoops();
  AfterSessionActivity();
}

void PeerConnection::StartDial(const std::string& host, const std::string& port, PeerResolver& resolver) {
  dialled_ = true;
  phase_.Enter(PeerPhase::kResolving);
  remote_ = BracketedHost(host) + ":" + port;  // until connected
  // Our connect waits in the queue until the socket is up; the handshake
  // deadline waits for the TCP connect (OnResolved).
  session_->StartAwaitingTransport();
  uint16_t port_number = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  const bool numeric = error == std::errc() && end == port.data() + port.size();
  std::weak_ptr<PeerConnection> weak = weak_from_this();
  auto resolved = [weak, host, port](ResolveOutcome outcome) {
    if (auto self = weak.lock()) self->OnResolved(host, port, std::move(outcome));
  };
  if (numeric) {
    lookup_ = resolver.Resolve(host, port_number, std::move(resolved));
  } else {
    ResolveOutcome bad_port;
    bad_port.failure = ResolveFailure::kBadName;
    bad_port.error = "the port is not a number from 0 to 65535";
    asio::post(socket_.get_executor(), [resolved, bad_port] { resolved(bad_port); });
  }
  // The tick loop runs from now on: the work's own timeouts run during the lookup.
  StartTickLoop();
}

void PeerConnection::OnResolved(const std::string& host, const std::string& port, ResolveOutcome outcome) {
  lookup_.reset();
  if (closed()) return;
  if (outcome.failure) {
    CloseSocketAndSession(session::CloseCause::kConnectFailed, "cannot connect to " + remote_ + ": " + outcome.error);
    return;
  }
  phase_.Enter(PeerPhase::kConnecting);
  session_->TransportUp();  // the handshake deadline covers the TCP connect, TLS and the handshake
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(),
      [self, host, port, endpoints = std::move(outcome.endpoints)]() mutable {
        return self->Dial(std::move(host), std::move(port), std::move(endpoints));
      },
      asio::detached);
}

asio::awaitable<void> PeerConnection::Dial(std::string host, std::string port, std::vector<tcp::endpoint> endpoints) {
  auto self = shared_from_this();
  boost::system::error_code ec;
  co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (closed()) co_return;
  if (ec) {
    CloseSocketAndSession(session::CloseCause::kConnectFailed,
                          "cannot connect to " + host + ":" + port + ": " + ec.message());
    co_return;
  }
  remote_.clear();  // the address actually connected to
  remote_ = remote_address();
  TunePeerSocket(socket_);
  if (stream_.needs_handshake()) {
    phase_.Enter(PeerPhase::kTlsHandshake);
    stream_.VerifyPeerName(host);
    co_await stream_.Handshake(asio::ssl::stream_base::client, ec);
    if (closed()) co_return;
    if (ec) {
      CloseSocketAndSession(session::CloseCause::kTls,
                            "TLS handshake with " + host + ":" + port + " failed: " + ec.message());
      co_return;
    }
  }
  StartLoops();
  AfterSessionActivity();
}

void PeerConnection::StartLoops() {
  phase_.Enter(PeerPhase::kRunning);
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->ReadLoop(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->WriteLoop(); }, asio::detached);
}

// Started once, when the connection starts (StartAccepted, StartDial), and
// runs until it closes: the work's own timeouts and the handshake deadline
// run in every phase.
void PeerConnection::StartTickLoop() {
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->TickLoop(); }, asio::detached);
}

// ---------------------------------------------------------------------------
// Reading

asio::awaitable<void> PeerConnection::ReadLoop() {
  auto self = shared_from_this();
  while (!closed()) {
    if (max_queued_bytes_ != 0 && queued_bytes_ > max_queued_bytes_) {
      co_await WaitForQueueToDrain();
      continue;
    }
    {
      // Every read goes exactly where the decoder wants its next bytes: the
      // prefix, the header, or the payload's destination slot. On plain TCP
      // no payload byte is copied in user space, so an engine that shrinks
      // its region under a load makes the kernel fail the read (EFAULT)
      // instead of the daemon faulting (SIGBUS); under TLS see PlaceBounced.
      // Wire spec section 2: before ready a frame may carry at most 64 KiB
      // of header and no payload; the decoder refuses more from the prefix.
      if (decoder_.state() == protocol::FrameDecoder::State::kReadingPrefix)
        decoder_.SetMaxLengths(session_->MaxInboundHeaderLen(), session_->MaxInboundPayloadLen());
      boost::system::error_code ec;
      const bool payload = decoder_.state() == protocol::FrameDecoder::State::kReadingPayload;
      auto target = decoder_.WritableSpan();
      stream_.SetReceiveLowWater(decoder_.payload_remaining());
      // Under TLS the payload is decrypted in user space: into the staging
      // buffer, never into a mapping a truncation could pull away (SIGBUS),
      // and into the slot only a whole piece at a time (OnStagedBytes).
      const bool into_slot = payload && stream_.zero_copy();
      const bool staged = payload && !stream_.zero_copy() && !decoder_.discarding_payload();
      // Plain TCP between payloads: one read takes the next frames' prefixes
      // and headers together (FeedReadAhead). Not right after a payload: in
      // a stream of data frames (bulk) the next payload comes straight from
      // the socket into its slots, as the exact reads take it.
      const bool read_ahead = !payload && stream_.zero_copy() && !last_frame_had_payload_;
      asio::mutable_buffer into(target.data(), target.size());
      if (staged) {
        const std::span<uint8_t> room = staging_.Room(target);
        into = asio::buffer(room.data(), room.size());
      } else if (read_ahead) {
        into = asio::buffer(read_ahead_);
      }
      reading_into_slot_ = into_slot;
      // The slot lets DivertAbandonedFrame take a pending read back from a
      // slot whose load has ended.
      size_t n = co_await stream_.async_read_some(
          into, asio::bind_cancellation_slot(read_cancel_.slot(), asio::redirect_error(asio::use_awaitable, ec)));
      reading_into_slot_ = false;
      last_read_at_ = std::chrono::steady_clock::now();
      if (closed()) break;
      if (std::exchange(read_diverted_, false) && ec == asio::error::operation_aborted) continue;
      if (!ec) {
        bytes_received_ += n;
        if (read_ahead) {
          if (!FeedReadAhead(std::span<const uint8_t>(read_ahead_.data(), n))) break;
          continue;
        }
        if (staged) {
          OnStagedBytes(n);
        } else {
          decoder_.Commit(n);
        }
        // A slow but moving data frame is not silence; a dribbled header
        // is. (The load timeout still bounds the load: a trickle keeps the
        // session, not its loads.)
        if (payload) session_->NoteBytesReceived();
      }
      if (ec == boost::system::errc::bad_address && into_slot) {
        // The kernel refused to copy into the slot and left the bytes in
        // the socket: only this load fails; the rest of its frame is dropped.
        session_->FailOpenFrame("a destination slot is no longer mapped (engine region truncated?)");
        decoder_.DiscardRestOfPayload();
        AfterSessionActivity();
        continue;
      }
      if (ec) {
        CloseSocketAndSession(session::CloseCause::kConnectionLost, ec == asio::error::eof
                                                                        ? "peer closed the connection"
                                                                        : "connection lost: " + ec.message());
        co_return;
      }
    }
    if (!ProcessDecoderState()) break;
  }
  if (phase_.lingering()) co_await DiscardUntilPeerCloses();
}

// The frames in one read are decoded and acted on in order, each under the
// limits the session sets for it (the first frames may be the handshake).
// Payload bytes that came with a header are placed into their slot through
// the region's descriptor (PlaceReadAhead), never through the mapping.
bool PeerConnection::FeedReadAhead(std::span<const uint8_t> bytes) {
  using State = protocol::FrameDecoder::State;
  while (!bytes.empty()) {
    if (closed()) return false;
    if (decoder_.state() == State::kReadingPrefix)
      decoder_.SetMaxLengths(session_->MaxInboundHeaderLen(), session_->MaxInboundPayloadLen());
    const bool into_slot = decoder_.state() == State::kReadingPayload && !decoder_.discarding_payload();
    const size_t used = into_slot ? PlaceReadAhead(bytes) : decoder_.Feed(bytes);
    bytes = bytes.subspan(used);
    if (!ProcessDecoderState()) return false;
  }
  return true;
}

size_t PeerConnection::PlaceReadAhead(std::span<const uint8_t> bytes) {
  const std::span<uint8_t> slot = decoder_.WritableSpan();
  const size_t n = std::min(slot.size(), bytes.size());
  session_->NoteBytesReceived();
  const bool placed = ShmRegion::WriteMapped(slot.data(), bytes.first(n));
  if (!placed) {
    session_->FailOpenFrame("a destination slot is no longer backed by its file (engine region truncated?)");
    decoder_.DiscardRestOfPayload();  // these bytes count as a late read of the dropped rest
  }
  decoder_.Commit(n);
  if (!placed) AfterSessionActivity();
  return n;
}

void PeerConnection::OnStagedBytes(size_t n) {
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
    session_->FailOpenFrame("a destination slot is no longer backed by its file (engine region truncated?)");
    decoder_.DiscardRestOfPayload();  // the piece counts as a late read of the dropped rest
  }
  decoder_.Commit(destination.size());
  if (!placed) AfterSessionActivity();
}

// Bytes below the low-water mark wake no one: on a link slower than the
// mark per liveness period, or one that stalled, they would sit unread and
// the peer would look silent. After kLowWaterPatience without a read, any
// waiting bytes are taken (the mark drops to 1; the next read raises it).
void PeerConnection::ReadBytesBelowLowWater() {
  constexpr auto kLowWaterPatience = std::chrono::milliseconds(500);
  if (stream_.receive_low_water() <= 1 || std::chrono::steady_clock::now() - last_read_at_ < kLowWaterPatience) return;
  boost::system::error_code ec;
  if (socket_.available(ec) == 0 || ec) return;
  stream_.SetReceiveLowWater(1);  // the kernel wakes the pending read at once
}

// Reading only what the writer can answer keeps a peer that sends lookups
// but never reads our answers from growing the queue without bound: its
// frames wait in the kernel's buffers, then in its own.
asio::awaitable<void> PeerConnection::WaitForQueueToDrain() {
  reading_paused_ = true;
  listener_.OnLimitHit(*this, "max-queued-bytes", 1,
                       "stopped reading: " + std::to_string(queued_bytes_) +
                           " bytes wait to be written (max-queued-bytes " + std::to_string(max_queued_bytes_) +
                           "); the peer is not reading what we send");
  while (!closed() && queued_bytes_ > max_queued_bytes_ / 2) {
    boost::system::error_code ec;
    reader_wake_.expires_at(asio::steady_timer::time_point::max());
    co_await reader_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  reading_paused_ = false;
}

bool PeerConnection::ProcessDecoderState() {
  using State = protocol::FrameDecoder::State;
  for (;;) {
    switch (decoder_.state()) {
      case State::kFailed:
        session_->Close(session::CloseCause::kMalformedFrame, decoder_.error().message(), true);
        NoteViolation(nullptr);
        AfterSessionActivity();
        return false;
      case State::kHeaderReady:
        if (!OnHeaderReady()) return false;
        break;
      case State::kFrameReady:
        OnFrameReady();
        if (closed() || session_->state() == session::PeerSession::State::kClosed) {
          AfterSessionActivity();
          return false;
        }
        break;
      default:
        return true;
    }
  }
}

bool PeerConnection::OnHeaderReady() {
  const auto* block_data = std::get_if<protocol::BlockData>(&decoder_.message());
  if (block_data == nullptr) {  // an unknown type's payload: skipped
    decoder_.DiscardPayload();
    return true;
  }
  session::BlockDataPlan plan;
  Status status = session_->OnBlockDataHeader(*block_data, &plan);
  if (!status.ok()) {
    NoteViolation(&decoder_.message());
    AfterSessionActivity();
    return false;
  }
  if (plan.discard) {
    decoder_.DiscardPayload();
  } else {
    decoder_.ReceivePayloadInto(std::move(plan.targets));
  }
  return decoder_.state() != protocol::FrameDecoder::State::kFailed || ProcessDecoderState();
}

void PeerConnection::OnFrameReady() {
  const auto& message = decoder_.message();
  last_frame_had_payload_ = decoder_.payload_len() > 0;
  CountReceived(message);
  const uint64_t refused = session_->RoundsRefused();
  if (const auto* block_data = std::get_if<protocol::BlockData>(&message)) {
    session_->OnBlockDataComplete(*block_data);
  } else if (Status status = session_->OnMessage(message); !status.ok()) {
    NoteViolation(&message);
  } else if (std::holds_alternative<protocol::LookupResp>(message)) {
    listener_.OnLookupResp(*this);
  }
  if (const uint64_t now_refused = session_->RoundsRefused(); now_refused != refused) {
    const bool lookup = std::holds_alternative<protocol::Lookup>(message);
    listener_.OnLimitHit(*this, "max-rounds-per-peer", now_refused - refused,
                         std::string(lookup ? "answered a lookup all-miss" : "failed a fetch") + ": " +
                             std::to_string(session_->RoundsOpen()) + " rounds are open for this peer");
  }
  decoder_.NextFrame();
  AfterSessionActivity();
}

// ---------------------------------------------------------------------------
// Writing

void PeerConnection::CountReceived(const protocol::Message& message) {
  ++stats_.frames_received[message.index()];
  if (const auto* lookup = std::get_if<protocol::Lookup>(&message)) {
    stats_.lookup_keys_served += lookup->keys.size();
  } else if (const auto* resp = std::get_if<protocol::LookupResp>(&message)) {
    for (bool hit : resp->hits) stats_.lookup_hits_received += hit ? 1 : 0;
    // The peer answers lookups in the order they were sent; an entry
    // skipped here was never answered.
    for (auto it = lookups_awaiting_.begin(); it != lookups_awaiting_.end(); ++it) {
      if (it->first != resp->round_seq) continue;
      listener_.OnLookupAnswered(std::chrono::steady_clock::now() - it->second);
      lookups_awaiting_.erase(lookups_awaiting_.begin(), std::next(it));
      break;
    }
  }
}

void PeerConnection::CountSent(const protocol::Message& message) {
  ++stats_.frames_sent[message.index()];
  if (const auto* lookup = std::get_if<protocol::Lookup>(&message)) {
    stats_.lookup_keys_sent += lookup->keys.size();
  } else if (const auto* resp = std::get_if<protocol::LookupResp>(&message)) {
    for (bool hit : resp->hits) stats_.lookup_hits_served += hit ? 1 : 0;
  }
}

void PeerConnection::NoteViolation(const protocol::Message* message) {
  if (violation_) return;
  const session::CloseCause cause = session_->close_cause();
  if (cause == session::CloseCause::kMalformedFrame) {  // nothing of the frame is trusted
    violation_ = "malformed_frame";
  } else if (cause == session::CloseCause::kMessageBeforeHandshake) {
    violation_ = "before_handshake";
  } else if (cause == session::CloseCause::kBadMessage && message != nullptr) {
    violation_ = "bad_" + std::string(protocol::TypeName(*message));
  }
}

void PeerConnection::Enqueue(session::OutFrame frame) {
  if (closed()) return;
  if (const auto* lookup = std::get_if<protocol::Lookup>(&frame.message)) {
    if (lookups_awaiting_.size() == kMaxLookupsAwaiting) lookups_awaiting_.pop_front();
    lookups_awaiting_.emplace_back(lookup->round_seq, std::chrono::steady_clock::now());
  }
  NoteQueued(frame);
  std::string head = protocol::EncodeFrame(frame.message, PayloadBytes(frame));
  queued_bytes_ += head.size();
  queued_bytes_peak_ = std::max(queued_bytes_peak_, queued_bytes_);
  write_queue_.push_back(QueuedFrame{std::move(frame), std::move(head)});
  if (MayWriteControlFramesNow()) {
    // Issue 14 items 1 and 2: the first control frame queued in a turn of
    // the io_context goes on the wire at once, not one turn later through
    // the writer (an idle lookup's round trip); those queued after it in the
    // same turn (a burst of lookups or answers) go together at the end of
    // the turn, one gathered write for many frames.
    if (!flush_posted_) {
      WriteControlFramesNow();
      FlushControlFramesLater();
    }
    return;
  }
  writer_wake_.cancel();
}

void PeerConnection::NoteQueued(const session::OutFrame& frame) {
  const bool latency = std::holds_alternative<protocol::Lookup>(frame.message) ||
                       std::holds_alternative<protocol::LookupResp>(frame.message);
  if (latency) {
    send_low_water_.OnLatencyFrame(socket_.native_handle(), std::chrono::steady_clock::now());
  } else if (IsDataFrame(frame) && send_low_water_.bounded()) {
    send_low_water_.OnDataFrame(socket_.native_handle(), std::chrono::steady_clock::now());
  }
}

// Only between the writer's frames (write_in_progress_ false: the writer
// is parked or about to look at the queue again), only control frames
// (data frames need the writer's torn-source handling) and only plain TCP:
// a TLS record the socket took part of would be lost by a write that does
// not wait, so under TLS the writer writes everything.
bool PeerConnection::MayWriteControlFramesNow() const {
  return phase_.now() == PeerPhase::kRunning && stream_.zero_copy() && !write_in_progress_ && !write_queue_.empty() &&
         !IsDataFrame(write_queue_.front().frame);
}

bool PeerConnection::HeadWritten(QueuedFrame& queued, size_t& n) {
  const size_t left = queued.head.size() - queued.written;
  if (n < left) {
    queued.written += n;
    n = 0;
    return false;
  }
  n -= left;
  queued.written = queued.head.size();
  CountSent(queued.frame.message);
  return true;
}

// What the socket does not take now stays queued (a frame it took part of
// is finished first) and the writer, woken, waits for room.
void PeerConnection::WriteControlFramesNow() {
  while (MayWriteControlFramesNow()) {
    gathered_now_.clear();
    for (const QueuedFrame& queued : write_queue_) {
      if (IsDataFrame(queued.frame) || gathered_now_.size() == kMaxGatheredFrames) break;
      gathered_now_.emplace_back(queued.head.data() + queued.written, queued.head.size() - queued.written);
    }
    boost::system::error_code ec;
    size_t n = stream_.WriteSomeNow(gathered_now_, ec);
    bytes_sent_ += n;
    while (n > 0 && HeadWritten(write_queue_.front(), n)) {
      queued_bytes_ -= write_queue_.front().head.size();
      write_queue_.pop_front();
    }
    if (ec || FrontHalfWritten()) break;  // the writer meets a broken socket again and closes
  }
  if (reading_paused_ && queued_bytes_ <= max_queued_bytes_ / 2) reader_wake_.cancel();
  if (!write_queue_.empty()) writer_wake_.cancel();
}

void PeerConnection::FlushControlFramesLater() {
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    if (self->MayWriteControlFramesNow()) {
      self->WriteControlFramesNow();
    } else if (!self->write_queue_.empty()) {
      self->writer_wake_.cancel();
    }
  });
}

asio::awaitable<void> PeerConnection::WriteLoop() {
  auto self = shared_from_this();
  // A lingering connection still finishes the frame the socket took part of.
  while (!closed() || (phase_.lingering() && FrontHalfWritten())) {
    if (write_queue_.empty()) {
      // Pulling also tells the session the previous data frame is written,
      // which may release store results held until then.
      session_->ProduceDataFrame();
      listener_.OnSessionActivity(*this, *session_);
    }
    if (write_queue_.empty()) {
      boost::system::error_code ec;
      writer_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await writer_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    boost::system::error_code ec;
    if (IsDataFrame(write_queue_.front().frame)) {
      co_await WriteDataFrame(ec);
    } else {
      co_await WriteControlFrames(ec);
    }
    if (closed()) {
      if (phase_.lingering()) SendDisconnectAndFin();  // the frame is out: the disconnect may follow it
      co_return;
    }
    if (ec) {
      CloseSocketAndSession(session::CloseCause::kConnectionLost, "write failed: " + ec.message());
      co_return;
    }
  }
}

asio::awaitable<void> PeerConnection::WriteDataFrame(boost::system::error_code& ec) {
  QueuedFrame queued = std::move(write_queue_.front());
  write_queue_.pop_front();
  queued_bytes_ -= queued.head.size();
  if (reading_paused_ && queued_bytes_ <= max_queued_bytes_ / 2) reader_wake_.cancel();
  const bool torn = co_await WriteFrame(queued, ec);
  if (closed() || ec) co_return;
  CountSent(queued.frame.message);
  const auto& data = std::get<protocol::BlockData>(queued.frame.message);
  if (torn) {
    OnFrameNotServed(data,
                     "a source block could not be read while its frame was written (engine region "
                     "truncated); the rest of the frame was sent as zeros");
  } else if (!SealsHeld(queued.frame.blocks)) {
    OnFrameNotServed(data,
                     "a source block published sealed no longer held its sealed bytes after it was sent "
                     "(its slot was reused); its keys are withdrawn");
  }
  // `queued` dies here: its source blocks are unpinned now that they are on the wire.
}

// The batch leaves the queue first, so a close (which empties the queue)
// cannot pull the bytes of a write in flight away.
asio::awaitable<void> PeerConnection::WriteControlFrames(boost::system::error_code& ec) {
  control_batch_.clear();
  size_t batch_bytes = 0;
  while (!write_queue_.empty() && control_batch_.size() < kMaxGatheredFrames &&
         !IsDataFrame(write_queue_.front().frame)) {
    if (phase_.lingering() && write_queue_.front().written == 0) break;
    batch_bytes += write_queue_.front().head.size();
    if (!control_batch_.empty() && batch_bytes > kMaxGatheredBytes) break;
    queued_bytes_ -= write_queue_.front().head.size();
    control_batch_.push_back(std::move(write_queue_.front()));
    write_queue_.pop_front();
    if (phase_.lingering()) break;  // the session is over: only the frame begun is finished
  }
  if (reading_paused_ && queued_bytes_ <= max_queued_bytes_ / 2) reader_wake_.cancel();
  write_in_progress_ = true;
  last_write_progress_ = std::chrono::steady_clock::now();
  size_t first = 0;  // the first frame not wholly written
  while (first < control_batch_.size() && MayWriteOn()) {
    // Closed meanwhile: a frame not begun is dropped with the session.
    if (phase_.lingering() && control_batch_[first].written == 0) break;
    gathered_.clear();
    for (size_t i = first; i < control_batch_.size(); ++i) {
      const QueuedFrame& queued = control_batch_[i];
      gathered_.emplace_back(queued.head.data() + queued.written, queued.head.size() - queued.written);
    }
    size_t n = co_await stream_.WriteSome(gathered_, ec);
    if (n > 0) {
      bytes_sent_ += n;
      last_write_progress_ = std::chrono::steady_clock::now();
    }
    while (n > 0 && HeadWritten(control_batch_[first], n)) ++first;
    if (ec) break;
  }
  write_in_progress_ = false;
  control_batch_.clear();
}

asio::awaitable<bool> PeerConnection::WriteFrame(const QueuedFrame& queued, boost::system::error_code& ec) {
  OutgoingFrame out(queued.head, queued.frame.blocks, stream_.zero_copy() ? nullptr : &bounce_out_);
  write_in_progress_ = true;
  last_write_progress_ = std::chrono::steady_clock::now();
  while (!ec && !out.done() && MayWriteOn()) {
    const size_t n = co_await stream_.WriteSome(out.Next(), ec);
    if (n > 0) {
      bytes_sent_ += n;
      out.Consumed(n);
      last_write_progress_ = std::chrono::steady_clock::now();
    }
    if (!MayWriteOn()) break;
    // Plain TCP: the kernel could not read a source block (its file was
    // truncated) and wrote nothing of it; zeros finish the frame.
    if (ec == boost::system::errc::bad_address && stream_.zero_copy() && out.TearHere()) {
      ec.clear();
      continue;
    }
    if (ec) break;
  }
  write_in_progress_ = false;
  co_return !ec && !closed() && out.done() && out.CheckSourcesAfterWrite();
}

// Every sealed block of the frame is hashed again now that the kernel has
// its bytes (docs/vllm.md, "Serving without pins"): a slot its engine
// reused without unpublishing fails the round, so even a consumer without
// the xxh3 feature never counts those bytes, and the stale keys go.
bool PeerConnection::SealsHeld(const std::vector<session::PinRef>& blocks) {
  bool held = true;
  for (const session::PinRef& block : blocks) held = block->SealHoldsAfterWrite() && held;
  return held;
}

// The frame's round fails: the session ends it (and its store jobs) and a
// transfer_done{success:true} already queued behind the frame, from when
// the round looked complete, is turned into a failure before it goes.
void PeerConnection::OnFrameNotServed(const protocol::BlockData& data, std::string_view why) {
  const std::string reason =
      "kv_request_id " + data.kv_request_id + " round " + std::to_string(data.round_seq) + ": " + std::string(why);
  spdlog::warn("peer {}: {}", session_->peer_id(), reason);
  session_->OnDataFrameTorn(data, reason);
  for (QueuedFrame& queued : write_queue_) {
    auto* done = std::get_if<protocol::TransferDone>(&queued.frame.message);
    if (done == nullptr || queued.written != 0 || !done->success || done->kv_request_id != data.kv_request_id ||
        done->round_seq != data.round_seq) {
      continue;
    }
    done->success = false;
    queued_bytes_ -= queued.head.size();
    queued.head = protocol::EncodeFrame(queued.frame.message, 0);
    queued_bytes_ += queued.head.size();
  }
  AfterSessionActivity();
}

bool PeerConnection::WriterStalled() const {
  return write_in_progress_ && std::chrono::steady_clock::now() - last_write_progress_ >= liveness_timeout_;
}

// ---------------------------------------------------------------------------
// Timers and lifecycle

asio::awaitable<void> PeerConnection::TickLoop() {
  auto self = shared_from_this();
  while (!closed()) {
    auto next = std::chrono::steady_clock::now() + kMaxTickInterval;
    if (auto deadline = session_->NextDeadline(); deadline && *deadline < next) next = *deadline;
    tick_timer_.expires_at(next);
    boost::system::error_code ec;
    co_await tick_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (closed()) co_return;
    if (WriterStalled()) {
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(liveness_timeout_).count();
      CloseSocketAndSession(session::CloseCause::kPeerSilent,
                            "peer silent as a reader (it stopped reading): the socket accepted no byte for " +
                                std::to_string(seconds) + " s while frames waited to be written");
      co_return;
    }
    ReadBytesBelowLowWater();
    if (write_in_progress_ || !write_queue_.empty() || session_->HasDataToSend()) session_->NoteWritesPending();
    session_->OnTick();
    AfterSessionActivity();
  }
}

void PeerConnection::AfterSessionActivity() {
  if (!ever_ready_ && session_->ready()) ever_ready_ = true;
  if (closed() || session_->state() == session::PeerSession::State::kClosed) lookup_.reset();  // taken back
  DivertAbandonedFrame();
  if (!closed() && session_->state() == session::PeerSession::State::kClosed) {
    // The session ended itself (violation, timeout, peer's disconnect) or
    // its owner ended it: nothing more is read into a slot from here on,
    // before anyone learns that its loads failed.
    reader_wake_.cancel();
    writer_wake_.cancel();
    tick_timer_.cancel();
    if (reading_into_slot_ || !phase_.loops_started()) {
      // A pending read targets a slot: only closing the socket stops it.
      // The disconnect goes out only if no frame is half-written.
      TrySendDisconnectNow();
      EnterClosed();
    } else {
      Linger();
    }
    // The PeerManager logs the close (OnConnectionClosed), with its class.
  }
  // Control frames a posted flush will gather need no writer (Enqueue).
  if (!closed() && ((!write_queue_.empty() && !flush_posted_) || session_->HasDataToSend())) writer_wake_.cancel();
  listener_.OnSessionActivity(*this, *session_);
  if (closed() && !close_reported_) {
    close_reported_ = true;
    listener_.OnConnectionClosed(*this);
  }
}

// A load ended (timeout, finish) while its frame's payload was arriving:
// the rest of that payload is read and dropped, so the load's result can be
// reported now rather than when a stalled link finally delivers the frame.
// Over TLS the pending read goes to the staging buffer, not the slot: the
// staged piece is dropped (what it held and what the read still brings
// count as read and discarded), so the read need not be taken back.
void PeerConnection::DivertAbandonedFrame() {
  if (closed() || !session_->OpenFrameAbandoned()) return;
  if (decoder_.state() != protocol::FrameDecoder::State::kReadingPayload) return;
  if (reading_into_slot_) {
    // Single-threaded: the read is queued in the reactor, not running, so
    // cancelling it means no byte of it reaches the slot from now on. A read
    // that already completed landed before the result is reported.
    read_diverted_ = true;
    read_cancel_.emit(asio::cancellation_type::total);
  }
  const size_t staged = staging_.Drop();
  decoder_.DiscardRestOfPayload();
  decoder_.Commit(staged);  // fewer than the payload still owes: a piece is never whole here
  session_->AbandonOpenFrame();
}

// A graceful close, so the peer reads our disconnect and its reason: the
// frame being written (if any) is finished, the disconnect follows, then a
// FIN; whatever the peer still sends is read and dropped until it closes
// too. Closing with unread bytes would make the kernel send a reset, which
// can destroy the disconnect before the peer reads it.
void PeerConnection::Linger() {
  phase_.Enter(PeerPhase::kLingering);
  // Only the disconnect is still to be written; the other frames' pins go now.
  // A control frame the socket took part of stays, to be finished first.
  std::erase_if(write_queue_, [](const QueuedFrame& queued) {
    return queued.written == 0 && !std::holds_alternative<protocol::Disconnect>(queued.frame.message);
  });
  queued_bytes_ = 0;
  auto self = shared_from_this();
  tick_timer_.expires_after(kMaxLinger);
  tick_timer_.async_wait([self](boost::system::error_code) { self->EndLinger(); });
  if (!write_in_progress_ && !FrontHalfWritten()) SendDisconnectAndFin();
}

void PeerConnection::SendDisconnectAndFin() {
  TrySendDisconnectNow();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> PeerConnection::DiscardUntilPeerCloses() {
  auto self = shared_from_this();
  stream_.SetReceiveLowWater(1);  // every byte, and the EOF, wakes the drain
  std::vector<char> scratch(16 * 1024);
  while (phase_.lingering()) {
    boost::system::error_code ec;
    co_await stream_.async_read_some(asio::buffer(scratch), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  EndLinger();
}

void PeerConnection::EndLinger() {
  if (!phase_.lingering()) return;
  tick_timer_.cancel();
  EnterClosed();
}

void PeerConnection::EnterClosed() {
  phase_.Enter(PeerPhase::kClosed);
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void PeerConnection::TrySendDisconnectNow() {
  // Only when no frame is half-written: a disconnect spliced into another
  // frame would corrupt the stream; the peer's liveness check covers the rest.
  if (write_in_progress_ || FrontHalfWritten() || !socket_.is_open() || !phase_.loops_started()) return;
  for (const QueuedFrame& queued : write_queue_) {
    const session::OutFrame& frame = queued.frame;
    if (!std::holds_alternative<protocol::Disconnect>(frame.message)) continue;
    std::string bytes = protocol::EncodeFrame(frame.message, 0);
    boost::system::error_code ec;
    const size_t n = stream_.TryWriteNow(asio::buffer(bytes), ec);
    bytes_sent_ += n;
    if (!ec && n == bytes.size()) CountSent(frame.message);
    return;
  }
}

void PeerConnection::CloseSocketAndSession(session::CloseCause cause, const std::string& reason) {
  if (closed()) return;
  EnterClosed();
  reader_wake_.cancel();
  writer_wake_.cancel();
  tick_timer_.cancel();
  session_->Close(cause, reason, false);
  write_queue_.clear();
  queued_bytes_ = 0;
  AfterSessionActivity();  // the PeerManager logs the close
}

void PeerConnection::Close(session::CloseCause cause, const std::string& reason, bool notify_peer,
                           session::JobFailure failure) {
  if (closed()) return;
  closed_by_owner_ = true;
  session_->Close(cause, reason, notify_peer, failure);
  AfterSessionActivity();
}

}  // namespace kvpeer::daemon
