#include "daemon/peer/peer_writer.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "daemon/peer/front_write.h"
#include "daemon/peer/outgoing_frame.h"
#include "daemon/peer/peer_connection.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;

namespace {

// Every sealed block of the frame is hashed again now that the kernel has
// its bytes (docs/vllm.md, "Serving without pins"): a slot its engine
// reused without unpublishing fails the round, so even a consumer without
// the xxh3 feature never counts those bytes, and the stale keys go.
bool SealsHeld(const std::vector<session::PinRef>& blocks) {
  bool held = true;
  for (const session::PinRef& block : blocks) held = block->SealHoldsAfterWrite() && held;
  return held;
}

}  // namespace

PeerWriter::PeerWriter(PeerConnection& connection, PeerStream& stream)
    : connection_(connection), stream_(stream), wake_(stream.socket().get_executor()) {
  wake_.expires_at(asio::steady_timer::time_point::max());
}

void PeerWriter::Enqueue(session::OutFrame frame) {
  NoteQueued(frame);
  queue_.Push(std::move(frame));
  if (MayWriteFrontNow()) {
    // The first control frame of this turn goes now; the rest of the turn's
    // go at its end, gathered (see the header comment).
    if (!flush_posted_) {
      WriteFrontNow(false);
      FlushLater();
    }
    return;
  }
  wake_.cancel();
}

void PeerWriter::NoteQueued(const session::OutFrame& frame) {
  // Keeps the socket's unsent-bytes bound in step with the frames queued.
  const bool latency = std::holds_alternative<protocol::Lookup>(frame.message) ||
                       std::holds_alternative<protocol::LookupResp>(frame.message);
  const int fd = stream_.socket().native_handle();
  if (latency) {
    send_low_water_.OnLatencyFrame(fd, std::chrono::steady_clock::now());
  } else if (std::holds_alternative<protocol::BlockData>(frame.message) && send_low_water_.bounded()) {
    send_low_water_.OnDataFrame(fd, std::chrono::steady_clock::now());
  }
}

bool PeerWriter::MayWriteFrontNow() const {
  return FrontWriteAllowed(connection_.phase_.now(), stream_.zero_copy(), write_in_progress_, queue_);
}

// What the socket does not take now stays queued (a frame it took part of
// is finished first) and the coroutine, woken, waits for room.
void PeerWriter::WriteFrontNow(bool last_words) {
  while (last_words || MayWriteFrontNow()) {
    queue_.GatherControlFront(gathered_now_);
    if (gathered_now_.empty()) break;
    boost::system::error_code ec;
    const size_t n =
        last_words ? stream_.TryWriteNow(gathered_now_.front(), ec) : stream_.WriteSomeNow(gathered_now_, ec);
    bytes_sent_ += n;
    queue_.ConsumeFront(n, [this](const QueuedFrame& queued) { connection_.CountSent(queued.frame.message); });
    // A broken socket: the coroutine meets it again and closes.
    if (last_words || ec || queue_.front_half_written()) break;
  }
  Dequeued();
  if (!last_words && !queue_.empty()) wake_.cancel();
}

void PeerWriter::FlushLater() {
  flush_posted_ = true;
  asio::post(stream_.socket().get_executor(), [self = connection_.shared_from_this(), this] {
    flush_posted_ = false;
    if (MayWriteFrontNow()) {
      WriteFrontNow(false);
    } else if (!queue_.empty()) {
      wake_.cancel();
    }
  });
}

void PeerWriter::WakeForActivity(bool session_has_data) {
  if ((!queue_.empty() && !flush_posted_) || session_has_data) wake_.cancel();
}

// Only when no frame is half-written and the socket is open and past its
// handshake: the disconnect alone (the frames queued before it are dropped
// with the session); the peer's liveness check covers the rest.
void PeerWriter::SendLastWords() {
  if (!MaySendLastWords() || !stream_.socket().is_open() || !connection_.phase_.loops_started()) return;
  queue_.KeepForLinger();
  WriteFrontNow(true);
}

void PeerWriter::Dequeued() { connection_.reader_.OnQueueShrunk(queue_.bytes()); }

void PeerWriter::Progress(size_t n) {
  if (n == 0) return;
  bytes_sent_ += n;
  last_progress_ = std::chrono::steady_clock::now();
}

bool PeerWriter::Stalled(std::chrono::steady_clock::duration liveness_timeout) const {
  return write_in_progress_ && std::chrono::steady_clock::now() - last_progress_ >= liveness_timeout;
}

asio::awaitable<void> PeerWriter::Run() {
  auto self = connection_.shared_from_this();
  const PeerPhaseTracker& phase = connection_.phase_;
  // A lingering connection still finishes the frame the socket took part of.
  while (!connection_.session_over() || (phase.lingering() && queue_.front_half_written())) {
    if (queue_.empty()) {
      // Pulling also tells the session the previous data frame is written,
      // which may release store results held until then.
      connection_.session_->ProduceDataFrame();
      connection_.listener_.OnSessionActivity(connection_, *connection_.session_);
    }
    if (queue_.empty()) {
      boost::system::error_code ec;
      wake_.expires_at(asio::steady_timer::time_point::max());
      co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    boost::system::error_code ec;
    if (queue_.front_is_data()) {
      co_await WriteDataFrame(ec);
    } else {
      co_await WriteControlFrames(ec);
    }
    if (connection_.session_over()) {
      if (phase.lingering()) connection_.SendDisconnectAndFin();  // the frame is out: the disconnect may follow it
      co_return;
    }
    if (ec) {
      connection_.CloseSocketAndSession(session::CloseCause::kConnectionLost, "write failed: " + ec.message());
      co_return;
    }
  }
}

asio::awaitable<void> PeerWriter::WriteDataFrame(boost::system::error_code& ec) {
  QueuedFrame queued = queue_.PopData();
  Dequeued();
  const bool torn = co_await WriteFrame(queued, ec);
  if (connection_.session_over() || ec) co_return;
  connection_.CountSent(queued.frame.message);
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
asio::awaitable<void> PeerWriter::WriteControlFrames(boost::system::error_code& ec) {
  const PeerPhaseTracker& phase = connection_.phase_;
  queue_.TakeControlBatch(batch_, phase.lingering());
  Dequeued();
  write_in_progress_ = true;
  last_progress_ = std::chrono::steady_clock::now();
  size_t first = 0;  // the first frame not wholly written
  while (first < batch_.size() && !phase.socket_closed()) {
    // Closed meanwhile: a frame not begun is dropped with the session.
    if (phase.lingering() && batch_[first].written == 0) break;
    gathered_.clear();
    for (size_t i = first; i < batch_.size(); ++i) {
      const QueuedFrame& queued = batch_[i];
      gathered_.emplace_back(queued.head.data() + queued.written, queued.head.size() - queued.written);
    }
    size_t n = co_await stream_.WriteSome(gathered_, ec);
    Progress(n);
    while (n > 0 && HeadWritten(batch_[first], n)) connection_.CountSent(batch_[first++].frame.message);
    if (ec) break;
  }
  write_in_progress_ = false;
  batch_.clear();
}

// A frame already started is finished even while the connection lingers (a
// graceful close: the disconnect must follow a whole frame), not once the
// socket is closed.
asio::awaitable<bool> PeerWriter::WriteFrame(const QueuedFrame& queued, boost::system::error_code& ec) {
  const PeerPhaseTracker& phase = connection_.phase_;
  OutgoingFrame out(queued.head, queued.frame.blocks, stream_.zero_copy() ? nullptr : &bounce_out_);
  write_in_progress_ = true;
  last_progress_ = std::chrono::steady_clock::now();
  while (!ec && !out.done() && !phase.socket_closed()) {
    const size_t n = co_await stream_.WriteSome(out.Next(), ec);
    Progress(n);
    if (n > 0) out.Consumed(n);
    if (phase.socket_closed()) break;
    // Plain TCP: the kernel could not read a source block (its file was
    // truncated) and wrote nothing of it; zeros finish the frame.
    if (ec == boost::system::errc::bad_address && stream_.zero_copy() && out.TearHere()) {
      ec.clear();
      continue;
    }
    if (ec) break;
  }
  write_in_progress_ = false;
  co_return !ec && !connection_.session_over() && out.done() && out.CheckSourcesAfterWrite();
}

// The frame's round fails: the session ends it (and its store jobs) and a
// transfer_done{success:true} already queued behind the frame, from when
// the round looked complete, is turned into a failure before it goes.
void PeerWriter::OnFrameNotServed(const protocol::BlockData& data, std::string_view why) {
  session::PeerSession& session = *connection_.session_;
  const std::string reason =
      "kv_request_id " + data.kv_request_id + " round " + std::to_string(data.round_seq) + ": " + std::string(why);
  spdlog::warn("peer {}: {}", session.peer_id(), reason);
  session.OnDataFrameTorn(data, reason);
  queue_.FailTransferDone(data.kv_request_id, data.round_seq);
  connection_.AfterSessionActivity();
}

}  // namespace kvpeer::daemon
