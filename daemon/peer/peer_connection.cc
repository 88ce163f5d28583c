#include "daemon/peer/peer_connection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/host_port.h"

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
// SendLowWater's.) A socket that refuses the option is left as it is: the
// connection works without it, and a broken socket fails its first read.
void TunePeerSocket(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

}  // namespace

PeerConnection::PeerConnection(PeerStream stream, session::SessionConfig config, session::PublishedBlocks& index,
                               std::string expected_peer_id, ConnectionListener& listener)
    : stream_(std::move(stream)),
      socket_(stream_.socket()),
      index_(index),
      listener_(listener),
      reader_(*this, stream_, config.block_len),
      writer_(*this, stream_),
      tick_timer_(socket_.get_executor()) {
  liveness_timeout_ = config.liveness_timeout;
  if (stream_.authenticates_peer()) {
    config.identity_check = [this](const std::string& peer_id) { return CheckIdentity(peer_id); };
  }
  session::SendFn send = [this](session::OutFrame frame) { Send(std::move(frame)); };
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
  if (session_over()) co_return;
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
  auto resolved = [weak, host, port](ResolvedEndpoints endpoints) {
    if (auto self = weak.lock()) self->OnResolved(host, port, std::move(endpoints));
  };
  if (numeric) {
    lookup_ = resolver.Resolve(host, port_number, std::move(resolved));
  } else {
    asio::post(socket_.get_executor(),
               [resolved] { resolved(Status::Invalid("the port is not a number from 0 to 65535")); });
  }
  // The tick loop runs from now on: the work's own timeouts run during the lookup.
  StartTickLoop();
}

void PeerConnection::OnResolved(const std::string& host, const std::string& port, ResolvedEndpoints endpoints) {
  lookup_.reset();
  if (session_over()) return;
  if (!endpoints.ok()) {
    CloseSocketAndSession(session::CloseCause::kConnectFailed,
                          "cannot connect to " + remote_ + ": " + endpoints.status().message());
    return;
  }
  phase_.Enter(PeerPhase::kConnecting);
  session_->TransportUp();  // the handshake deadline covers the TCP connect, TLS and the handshake
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(),
      [self, host, port, found = std::move(endpoints).value()]() mutable {
        return self->Dial(std::move(host), std::move(port), std::move(found));
      },
      asio::detached);
}

asio::awaitable<void> PeerConnection::Dial(std::string host, std::string port, std::vector<tcp::endpoint> endpoints) {
  auto self = shared_from_this();
  boost::system::error_code ec;
  co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (session_over()) co_return;
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
    if (Status verify = stream_.VerifyPeerName(host); !verify.ok()) {
      CloseSocketAndSession(session::CloseCause::kTls, "TLS with " + host + ":" + port + ": " + verify.message());
      co_return;
    }
    co_await stream_.Handshake(asio::ssl::stream_base::client, ec);
    if (session_over()) co_return;
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
      socket_.get_executor(), [self]() { return self->reader_.Run(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->writer_.Run(); }, asio::detached);
}

// Started once, when the connection starts (StartAccepted, StartDial), and
// runs until it closes: the work's own timeouts and the handshake deadline
// run in every phase.
void PeerConnection::StartTickLoop() {
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->TickLoop(); }, asio::detached);
}

asio::awaitable<void> PeerConnection::TickLoop() {
  auto self = shared_from_this();
  while (!session_over()) {
    auto next = std::chrono::steady_clock::now() + kMaxTickInterval;
    if (auto deadline = session_->NextDeadline(); deadline && *deadline < next) next = *deadline;
    tick_timer_.expires_at(next);
    boost::system::error_code ec;
    co_await tick_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (session_over()) co_return;
    if (writer_.Stalled(liveness_timeout_)) {
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(liveness_timeout_).count();
      CloseSocketAndSession(session::CloseCause::kPeerSilent,
                            "peer silent as a reader (it stopped reading): the socket accepted no byte for " +
                                std::to_string(seconds) + " s while frames waited to be written");
      co_return;
    }
    reader_.ReadBytesBelowLowWater();
    if (writer_.busy() || session_->HasDataToSend()) session_->NoteWritesPending();
    session_->OnTick();
    AfterSessionActivity();
  }
}

void PeerConnection::Send(session::OutFrame frame) {
  if (session_over()) return;
  if (const auto* lookup = std::get_if<protocol::Lookup>(&frame.message)) {
    if (lookups_awaiting_.size() == kMaxLookupsAwaiting) lookups_awaiting_.pop_front();
    lookups_awaiting_.emplace_back(lookup->round_seq, std::chrono::steady_clock::now());
  }
  writer_.Enqueue(std::move(frame));
}

void PeerConnection::AfterSessionActivity() {
  if (!ever_ready_ && session_->ready()) ever_ready_ = true;
  if (session_over() || session_->state() == session::PeerSession::State::kClosed) lookup_.reset();  // taken back
  reader_.DivertAbandonedFrame();
  if (!session_over() && session_->state() == session::PeerSession::State::kClosed) {
    // The session ended itself (violation, timeout, peer's disconnect) or
    // its owner ended it: nothing more is read into a slot from here on,
    // before anyone learns that its loads failed.
    Stop();
    if (reader_.reading_into_slot() || !phase_.loops_started()) {
      // A pending read targets a slot: only closing the socket stops it.
      // The disconnect goes out only if no frame is half-written.
      writer_.SendLastWords();
      CloseSocket();
    } else {
      Linger();
    }
    // The PeerManager logs the close (OnConnectionClosed), with its class.
  }
  if (!session_over()) writer_.WakeForActivity(session_->HasDataToSend());
  listener_.OnSessionActivity(*this, *session_);
  if (session_over() && !close_reported_) {
    close_reported_ = true;
    listener_.OnConnectionClosed(*this);
  }
}

void PeerConnection::Stop() {
  reader_.Wake();
  writer_.Wake();
  tick_timer_.cancel();
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
  writer_.KeepOnlyLastWords();
  auto self = shared_from_this();
  tick_timer_.expires_after(kMaxLinger);
  tick_timer_.async_wait([self](boost::system::error_code) { self->EndLinger(); });
  // Otherwise the writer sends them once its frame is out (PeerWriter::Run).
  if (writer_.MaySendLastWords()) SendDisconnectAndFin();
}

void PeerConnection::SendDisconnectAndFin() {
  writer_.SendLastWords();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

void PeerConnection::EndLinger() {
  if (!phase_.lingering()) return;
  tick_timer_.cancel();
  CloseSocket();
}

void PeerConnection::CloseSocket() {
  phase_.Enter(PeerPhase::kClosed);
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void PeerConnection::CloseSocketAndSession(session::CloseCause cause, const std::string& reason) {
  if (session_over()) return;
  CloseSocket();
  Stop();
  session_->Close(cause, reason, false);
  writer_.DropAll();
  AfterSessionActivity();  // the PeerManager logs the close
}

void PeerConnection::Close(session::CloseCause cause, const std::string& reason, bool notify_peer,
                           session::JobFailure failure) {
  if (session_over()) return;
  closed_by_owner_ = true;
  session_->Close(cause, reason, notify_peer, failure);
  AfterSessionActivity();
}

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
  } else if (cause == session::CloseCause::kBadMessage && message != nullptr) {
    violation_ = "bad_" + std::string(protocol::TypeName(*message));
  } else if (cause == session::CloseCause::kMessageBeforeHandshake) {
    violation_ = "before_handshake";
  }
}

}  // namespace kvpeer::daemon
