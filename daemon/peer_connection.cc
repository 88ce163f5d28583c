#include "daemon/peer_connection.h"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "protocol/frame.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Large enough to take many small control frames per read, small enough
// that block payloads mostly bypass it and land in their slots directly.
constexpr size_t kReadAheadBytes = 64 * 1024;
// Ticks run at least this often so liveness and timeouts never drift far.
constexpr auto kMaxTickInterval = std::chrono::milliseconds(200);

uint64_t PayloadBytes(const session::OutFrame& frame) {
  uint64_t total = 0;
  for (const auto& block : frame.blocks) total += block->bytes().size();
  return total;
}

}  // namespace

PeerConnection::PeerConnection(tcp::socket socket, session::SessionConfig config, session::BlockIndex& index,
                               std::string expected_peer_id, ConnectionListener& listener)
    : socket_(std::move(socket)),
      index_(index),
      listener_(listener),
      decoder_(protocol::DecodeContext{config.block_len}),
      read_buffer_(kReadAheadBytes),
      writer_wake_(socket_.get_executor()),
      tick_timer_(socket_.get_executor()) {
  writer_wake_.expires_at(asio::steady_timer::time_point::max());
  session::SendFn send = [this](session::OutFrame frame) { Enqueue(std::move(frame)); };
  session_ = std::make_unique<session::PeerSession>(
      std::move(config), [] { return std::chrono::steady_clock::now(); }, std::move(send), index_,
      std::move(expected_peer_id));
}

PeerConnection::~PeerConnection() = default;

std::string PeerConnection::remote_address() const {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  if (ec) return "unknown";
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

void PeerConnection::StartAccepted() {
  socket_.set_option(tcp::no_delay(true));
  session_->Start();
  StartLoops();
  AfterSessionActivity();
}

void PeerConnection::StartDial(const std::string& host, const std::string& port) {
  dialled_ = true;
  session_->Start();  // our connect waits in the queue until the socket is up
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), [self, host, port]() { return self->Dial(host, port); }, asio::detached);
  // The tick loop runs from now on so the handshake deadline covers the dial.
  asio::co_spawn(socket_.get_executor(), [self]() { return self->TickLoop(); }, asio::detached);
}

asio::awaitable<void> PeerConnection::Dial(std::string host, std::string port) {
  auto self = shared_from_this();
  boost::system::error_code ec;
  tcp::resolver resolver(socket_.get_executor());
  auto endpoints = co_await resolver.async_resolve(host, port, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec && !closed_) co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (closed_) co_return;
  if (ec) {
    CloseSocketAndSession("cannot connect to " + host + ":" + port + ": " + ec.message());
    co_return;
  }
  socket_.set_option(tcp::no_delay(true));
  StartLoops();
  AfterSessionActivity();
}

void PeerConnection::StartLoops() {
  loops_started_ = true;
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), [self]() { return self->ReadLoop(); }, asio::detached);
  asio::co_spawn(socket_.get_executor(), [self]() { return self->WriteLoop(); }, asio::detached);
  if (!dialled_) asio::co_spawn(socket_.get_executor(), [self]() { return self->TickLoop(); }, asio::detached);
}

// ---------------------------------------------------------------------------
// Reading

asio::awaitable<void> PeerConnection::ReadLoop() {
  auto self = shared_from_this();
  while (!closed_) {
    if (read_begin_ == read_end_) {
      read_begin_ = read_end_ = 0;
      boost::system::error_code ec;
      size_t n = 0;
      if (decoder_.state() == protocol::FrameDecoder::State::kReadingPayload) {
        // Straight into the destination slot (or the discard scratch).
        auto target = decoder_.WritableSpan();
        n = co_await socket_.async_read_some(asio::buffer(target.data(), target.size()),
                                             asio::redirect_error(asio::use_awaitable, ec));
        if (closed_) co_return;
        if (!ec) {
          bytes_received_ += n;
          decoder_.Commit(n);
        }
      } else {
        n = co_await socket_.async_read_some(asio::buffer(read_buffer_),
                                             asio::redirect_error(asio::use_awaitable, ec));
        if (closed_) co_return;
        if (!ec) {
          bytes_received_ += n;
          read_end_ = n;
        }
      }
      if (ec) {
        CloseSocketAndSession(ec == asio::error::eof ? "peer closed the connection"
                                                     : "connection lost: " + ec.message());
        co_return;
      }
    }
    if (read_begin_ < read_end_) {
      read_begin_ += decoder_.Feed({read_buffer_.data() + read_begin_, read_end_ - read_begin_});
    }
    if (!ProcessDecoderState()) co_return;
  }
}

bool PeerConnection::ProcessDecoderState() {
  using State = protocol::FrameDecoder::State;
  for (;;) {
    switch (decoder_.state()) {
      case State::kFailed:
        session_->Close(decoder_.error().message(), true);
        AfterSessionActivity();
        return false;
      case State::kHeaderReady:
        if (!OnHeaderReady()) return false;
        break;
      case State::kFrameReady:
        OnFrameReady();
        if (closed_ || session_->state() == session::PeerSession::State::kClosed) {
          AfterSessionActivity();
          return false;
        }
        break;
      default:
        return true;
    }
    // A state change may have made buffered bytes consumable again.
    if (read_begin_ < read_end_ && decoder_.state() != State::kFrameReady) {
      read_begin_ += decoder_.Feed({read_buffer_.data() + read_begin_, read_end_ - read_begin_});
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
  if (const auto* block_data = std::get_if<protocol::BlockData>(&message)) {
    session_->OnBlockDataComplete(*block_data);
  } else {
    session_->OnMessage(message);
  }
  decoder_.NextFrame();
  AfterSessionActivity();
}

// ---------------------------------------------------------------------------
// Writing

void PeerConnection::Enqueue(session::OutFrame frame) {
  if (closed_) return;
  write_queue_.push_back(std::move(frame));
  writer_wake_.cancel();
}

asio::awaitable<void> PeerConnection::WriteLoop() {
  auto self = shared_from_this();
  while (!closed_) {
    if (write_queue_.empty()) {
      // Pulling also tells the session the previous data frame is written,
      // which may release store results held until then.
      session_->ProduceDataFrame();
      listener_.OnSessionActivity(*this);
    }
    if (write_queue_.empty()) {
      boost::system::error_code ec;
      writer_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await writer_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    session::OutFrame frame = std::move(write_queue_.front());
    write_queue_.pop_front();
    std::string head = protocol::EncodeFrame(frame.message, PayloadBytes(frame));
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(1 + frame.blocks.size());
    buffers.emplace_back(head.data(), head.size());
    for (const auto& block : frame.blocks) buffers.emplace_back(block->bytes().data(), block->bytes().size());
    boost::system::error_code ec;
    write_in_progress_ = true;
    size_t n = co_await asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
    write_in_progress_ = false;
    bytes_sent_ += n;
    if (closed_) co_return;
    if (ec) {
      CloseSocketAndSession("write failed: " + ec.message());
      co_return;
    }
    // `frame` dies here: its source blocks are unpinned now that they are on the wire.
  }
}

// ---------------------------------------------------------------------------
// Timers and lifecycle

asio::awaitable<void> PeerConnection::TickLoop() {
  auto self = shared_from_this();
  while (!closed_) {
    auto next = std::chrono::steady_clock::now() + kMaxTickInterval;
    if (auto deadline = session_->NextDeadline(); deadline && *deadline < next) next = *deadline;
    tick_timer_.expires_at(next);
    boost::system::error_code ec;
    co_await tick_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (closed_) co_return;
    session_->OnTick();
    AfterSessionActivity();
  }
}

void PeerConnection::AfterExternalOp() { AfterSessionActivity(); }

void PeerConnection::AfterSessionActivity() {
  if (!closed_ && session_->state() == session::PeerSession::State::kClosed) {
    // The session ended itself (violation, timeout, peer's disconnect): stop
    // the socket before anyone learns that its loads failed.
    TrySendDisconnectNow();
    closed_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    writer_wake_.cancel();
    tick_timer_.cancel();
    spdlog::info("peer {}: session closed: {}", session_->peer_id(), session_->close_reason());
  }
  if (!closed_ && (!write_queue_.empty() || session_->HasDataToSend())) writer_wake_.cancel();
  listener_.OnSessionActivity(*this);
  if (closed_ && !close_reported_) {
    close_reported_ = true;
    listener_.OnConnectionClosed(*this);
  }
}

void PeerConnection::TrySendDisconnectNow() {
  // Only when no frame is half-written: a disconnect spliced into another
  // frame would corrupt the stream; the peer's liveness check covers the rest.
  if (write_in_progress_ || !socket_.is_open() || !loops_started_) return;
  for (const auto& frame : write_queue_) {
    if (!std::holds_alternative<protocol::Disconnect>(frame.message)) continue;
    std::string bytes = protocol::EncodeFrame(frame.message, 0);
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    if (!ec) socket_.write_some(asio::buffer(bytes), ec);
    return;
  }
}

void PeerConnection::CloseSocketAndSession(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  writer_wake_.cancel();
  tick_timer_.cancel();
  session_->Close(reason, false);
  write_queue_.clear();
  spdlog::info("peer {}: connection closed: {}", session_->peer_id(), reason);
  AfterSessionActivity();
}

void PeerConnection::Close(const std::string& reason, bool notify_peer) {
  if (closed_) return;
  if (notify_peer && !write_in_progress_ && loops_started_) {
    std::string bytes = protocol::EncodeFrame(protocol::Disconnect{reason}, 0);
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    if (!ec) socket_.write_some(asio::buffer(bytes), ec);
  }
  CloseSocketAndSession(reason);
}

}  // namespace kvpeer::daemon
