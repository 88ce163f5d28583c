#include "protocol/features.h"
#include "session/peer_session.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/utf8.h"
#include "protocol/codec.h"
#include "protocol/limits.h"
#include "session/internal/handshake.h"
#include "session/peer_disconnect_reason.h"

namespace kvpeer::session {

namespace {

// The wire caps a disconnect reason at 4096 characters; a role's violation
// message may quote peer input of any length.
std::string CapReason(const std::string& reason) {
  if (reason.size() <= protocol::kMaxStringChars) return reason;
  return Utf8Prefix(reason, protocol::kMaxStringChars - 3) + "...";
}

constexpr char kNoNonce[] = "no random nonce: the token source failed";

std::string FormatDuration(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

template <typename T>
void Append(std::vector<T>& to, std::vector<T> from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

// Messages that belong to the roles and so only make sense after the handshake.
template <typename T>
constexpr bool kIsRoleMessage = std::is_same_v<T, protocol::Lookup> || std::is_same_v<T, protocol::LookupResp> ||
                                std::is_same_v<T, protocol::Fetch> || std::is_same_v<T, protocol::TransferDone> ||
                                std::is_same_v<T, protocol::AbortFetch> || std::is_same_v<T, protocol::AbortAck>;

// Liveness frames: they keep a connection alive but are no work, so they
// never postpone the idle close (SessionConfig::idle_timeout).
bool IsLiveness(const protocol::Message& message) {
  return std::holds_alternative<protocol::Ping>(message) || std::holds_alternative<protocol::Pong>(message);
}

HandshakeSettings ToHandshakeSettings(const SessionConfig& config, const std::string& expected_peer_id) {
  return {config.local_id, config.block_len, config.config_fingerprint, config.hash_seed,     config.epoch,
          config.psk,      expected_peer_id, config.features,           config.identity_check};
}

}  // namespace

struct PeerSession::Impl {
  Impl(SessionConfig config_in, Clock clock_in, SendFn send_in, PublishedBlocks& index, std::string expected)
      : config(std::move(config_in)),
        clock(std::move(clock_in)),
        send(std::move(send_in)),
        expected_peer_id(std::move(expected)),
        handshake(ToHandshakeSettings(config, expected_peer_id)),
        peer_id(expected_peer_id) {
    // A session has no fallback of its own: a predictable nonce would void
    // the PSK handshake, so its owner chooses the source.
    if (!config.random_token) throw std::logic_error("SessionConfig::random_token is required");
    const std::string label = expected_peer_id.empty() ? "(accepted connection)" : expected_peer_id;
    ServerConfig server_config = config.server;
    server_config.block_len = config.block_len;
    // The roles' frames go through the gate; `this` outlives both roles.
    client = std::make_unique<ClientRole>(label, config.client, clock, [this](OutFrame f) { GatedSend(std::move(f)); });
    server = std::make_unique<ServerRole>(
        label, server_config, clock, [this](OutFrame f) { GatedSend(std::move(f)); }, index);
  }

  void Start();
  void TransportUp();
  Status Dispatch(const protocol::Message& message);
  Status Handle(const protocol::Connect& message);
  Status Handle(const protocol::ConnectAck& message);
  Status Handle(const protocol::Disconnect& message);
  Status Handle(const protocol::Ping& message);
  Status Handle(const protocol::Pong& message);
  Status Handle(const protocol::Lookup& message);
  Status Handle(const protocol::LookupResp& message);
  Status Handle(const protocol::Fetch& message);
  Status Handle(const protocol::BlockData& message);
  Status Handle(const protocol::TransferDone& message);
  Status Handle(const protocol::AbortFetch& message);
  Status Handle(const protocol::AbortAck& message);
  Status Handle(const protocol::Unknown& message);
  Status OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan);
  void OnTick();
  std::optional<TimePoint> NextDeadline() const;
  // Neither role holds anything (the idle timeout may run).
  bool RolesIdle() const { return client->Idle() && server->Idle(); }
  bool IdleTimeoutOn() const { return state == State::kReady && config.idle_timeout > Duration::zero(); }
  void MaybeCloseIdle(TimePoint now);
  void Close(CloseCause cause, const std::string& reason, bool notify_peer,
             JobFailure failure = JobFailure::kSessionClosed);
  SessionResults TakeResults();

  void GatedSend(OutFrame frame);
  void DirectSend(protocol::Message message);
  void DirectSend(OutFrame frame);
  Status Fail(CloseCause cause, Status status);
  // A role's failure: a violation, or a call that should not have been made.
  Status FailRole(Status status);
  Status MaybeReady();
  void Received() { last_receive = clock(); }
  // Takes the clock reading Received() just made: no second read per frame.
  void ReceivedWork() { last_work = last_receive; }

  SessionConfig config;
  Clock clock;
  SendFn send;
  std::string expected_peer_id;
  Handshake handshake;
  std::string peer_id;
  State state = State::kHandshaking;
  bool started = false;
  bool awaiting_transport = false;  // see PeerSession::StartAwaitingTransport
  // Role frames sent before ready, flushed in order once ready.
  std::deque<OutFrame> queued;
  std::string close_reason;
  CloseCause close_cause = CloseCause::kOpen;
  PeerDisconnectReason peer_disconnect_reason = PeerDisconnectReason::kUnspecified;
  bool hands_back_work = false;  // PeerSession::hands_back_work()
  SessionCounters counters;
  std::optional<Duration> rtt;
  TimePoint started_at{};
  TimePoint last_send{};
  TimePoint last_receive{};
  // The last frame other than ping and pong, either way, or the last tick
  // at which a role held work: the idle timeout runs from here.
  TimePoint last_work{};
  // The nonce of the ping whose pong we are waiting for, if any.
  std::optional<std::string> ping_nonce;
  TimePoint ping_sent_at{};
  // Results that can no longer come from the roles (Close, supply after
  // close), handed out by the next TakeResults.
  SessionResults closed_results;
  std::unique_ptr<ClientRole> client;
  std::unique_ptr<ServerRole> server;
};

void PeerSession::Impl::Start() {
  if (started || state == State::kClosed) return;
  started = true;
  const TimePoint now = clock();
  started_at = now;
  last_receive = now;
  // connect bypasses the gate: it is what opens the gate.
  std::optional<std::string> nonce = config.random_token();
  if (!nonce) {
    Close(CloseCause::kNoRandomToken, kNoNonce,
          /*notify_peer=*/false);  // nothing sent yet: the peer learns of it as a closed connection
    return;
  }
  DirectSend(protocol::Message(handshake.MakeConnect(std::move(*nonce))));
}

void PeerSession::Impl::TransportUp() {
  if (!awaiting_transport) return;
  awaiting_transport = false;
  const TimePoint now = clock();
  started_at = now;
  last_receive = now;
  last_send = now;
}

void PeerSession::Impl::GatedSend(OutFrame frame) {
  // After close the work behind a frame has already failed; dropping it is
  // what the peer expects from a dead connection.
  if (state == State::kClosed) return;
  if (state == State::kHandshaking) {
    queued.push_back(std::move(frame));
    return;
  }
  DirectSend(std::move(frame));
}

void PeerSession::Impl::DirectSend(protocol::Message message) { DirectSend(OutFrame{std::move(message), {}}); }

void PeerSession::Impl::DirectSend(OutFrame frame) {
  ++counters.frames_sent;
  last_send = clock();  // any frame, data included, makes a ping unnecessary
  if (!IsLiveness(frame.message)) last_work = last_send;
  send(std::move(frame));
}

Status PeerSession::Impl::Fail(CloseCause cause, Status status) {
  Close(cause, status.message(), /*notify_peer=*/true);
  return status;
}

Status PeerSession::Impl::FailRole(Status status) {
  if (status.ok()) return status;
  const CloseCause cause =
      status.code() == Status::Code::kViolation ? CloseCause::kBadMessage : CloseCause::kLocalError;
  return Fail(cause, std::move(status));
}

Status PeerSession::Impl::MaybeReady() {
  if (state != State::kHandshaking || !handshake.complete()) return Status::Ok();
  state = State::kReady;
  if (handshake.FeatureOn(protocol::kFeatureXxh3)) {
    client->EnableChecksums();
    server->EnableChecksums();
  }
  std::deque<OutFrame> pending = std::move(queued);
  queued.clear();
  for (OutFrame& frame : pending) DirectSend(std::move(frame));
  return Status::Ok();
}

Status PeerSession::Impl::Dispatch(const protocol::Message& message) {
  if (state == State::kClosed) return Status::Unavailable("session closed: " + close_reason);
  // Answering a connect before sending ours would put the ack first on the wire.
  Start();
  ++counters.frames_received;
  Received();
  if (!IsLiveness(message)) ReceivedWork();
  return std::visit(
      [this](const auto& m) -> Status {
        using T = std::decay_t<decltype(m)>;
        // Wire spec section 2: before ready only the handshake's own
        // messages and liveness may arrive; an unknown type is a violation
        // then (after ready it is ignored, for forward compatibility).
        if constexpr (kIsRoleMessage<T> || std::is_same_v<T, protocol::Unknown>) {
          if (state != State::kReady)
            return Fail(CloseCause::kMessageBeforeHandshake,
                        Status::Violation(std::string(protocol::TypeName(protocol::Message(m))) + " before handshake"));
        }
        return Handle(m);
      },
      message);
}

Status PeerSession::Impl::Handle(const protocol::Connect& message) {
  std::optional<protocol::ConnectAck> ack;
  if (Status s = handshake.OnConnect(message, &ack); !s.ok()) return Fail(handshake.failure(), s);
  if (expected_peer_id.empty()) peer_id = message.peer_id;
  // Without a PSK (and for a PSK dialer) answered at once, whether or not
  // the peer's ack has arrived; a PSK acceptor waits for the dialer's proof
  // (spec section 4, steps 3 and 4).
  if (ack) DirectSend(protocol::Message(std::move(*ack)));
  return MaybeReady();
}

Status PeerSession::Impl::Handle(const protocol::ConnectAck& message) {
  std::optional<protocol::ConnectAck> ack;
  if (Status s = handshake.OnConnectAck(message, &ack); !s.ok()) return Fail(handshake.failure(), s);
  if (ack) DirectSend(protocol::Message(std::move(*ack)));  // a PSK acceptor, the dialer now proven
  return MaybeReady();
}

Status PeerSession::Impl::Handle(const protocol::Disconnect& message) {
  std::string reason = "peer disconnected";
  if (message.reason) reason += ": " + *message.reason;
  // Peer input: mapped once, by exact match, so no text the peer sends
  // can choose how this close is counted (peer_disconnect_reason.h).
  peer_disconnect_reason = ParseDisconnectReason(message.reason);
  Close(CloseCause::kPeerDisconnected, reason, /*notify_peer=*/false);  // the peer has gone; answering is pointless
  return Status::Unavailable(reason);
}

Status PeerSession::Impl::Handle(const protocol::Ping& message) {
  // Answered directly, also during the handshake: liveness is not role traffic.
  DirectSend(protocol::Message(protocol::Pong{message.nonce}));
  return Status::Ok();
}

Status PeerSession::Impl::Handle(const protocol::Pong& message) {
  // A pong for an older ping (superseded by a newer one) measures nothing.
  if (ping_nonce && *ping_nonce == message.nonce) {
    rtt = clock() - ping_sent_at;
    ping_nonce.reset();
  }
  return Status::Ok();
}

Status PeerSession::Impl::Handle(const protocol::Lookup& message) {
  server->OnLookup(message);
  return Status::Ok();
}

Status PeerSession::Impl::Handle(const protocol::Fetch& message) { return FailRole(server->OnFetch(message)); }

Status PeerSession::Impl::Handle(const protocol::AbortFetch& message) {
  server->OnAbortFetch(message);
  return Status::Ok();
}

Status PeerSession::Impl::Handle(const protocol::LookupResp& message) {
  client->OnLookupResp(message);
  return Status::Ok();
}

Status PeerSession::Impl::Handle(const protocol::TransferDone& message) {
  return FailRole(client->OnTransferDone(message));
}

Status PeerSession::Impl::Handle(const protocol::AbortAck& message) { return FailRole(client->OnAbortAck(message)); }

Status PeerSession::Impl::Handle(const protocol::BlockData&) {
  // The payload needs a destination plan; only OnBlockDataHeader can give one.
  return Fail(CloseCause::kLocalError, Status::Internal("block_data passed to OnMessage instead of OnBlockDataHeader"));
}

Status PeerSession::Impl::Handle(const protocol::Unknown&) {
  // Forward compatibility (spec section 2): newer peers may send types we lack.
  ++counters.unknown_types;
  return Status::Ok();
}

Status PeerSession::Impl::OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan) {
  if (state == State::kClosed) return Status::Unavailable("session closed: " + close_reason);
  ++counters.frames_received;
  Received();
  ReceivedWork();
  if (state != State::kReady)
    return Fail(CloseCause::kMessageBeforeHandshake, Status::Violation("block_data before handshake"));
  return FailRole(client->OnBlockDataHeader(message, plan));
}

void PeerSession::Impl::OnTick() {
  if (state == State::kClosed || !started) return;
  if (awaiting_transport) {  // nothing to hear from or say to the peer yet; the work's own timeouts run
    client->OnTick();
    server->OnTick();
    return;
  }
  const TimePoint now = clock();
  if (state == State::kHandshaking && now - started_at >= config.handshake_timeout) {
    Close(CloseCause::kHandshakeTimeout, DisconnectReasonText(PeerDisconnectReason::kHandshakeTimedOut),
          /*notify_peer=*/true);
    return;
  }
  if (now - last_receive >= config.liveness_timeout) {
    Close(CloseCause::kPeerSilent, "peer silent for " + FormatDuration(config.liveness_timeout), /*notify_peer=*/true);
    return;
  }
  if (now - last_send >= config.ping_interval) {
    ping_nonce = config.random_token();
    if (!ping_nonce) {
      Close(CloseCause::kNoRandomToken, kNoNonce, /*notify_peer=*/true);
      return;
    }
    ping_sent_at = now;
    DirectSend(protocol::Message(protocol::Ping{*ping_nonce}));
  }
  client->OnTick();
  server->OnTick();
  MaybeCloseIdle(now);
}

// docs/operations.md, "Idle peer connections": the close is graceful
// because it happens only when this end holds no work of the connection;
// whatever the peer sent that crosses the disconnect was never served here.
void PeerSession::Impl::MaybeCloseIdle(TimePoint now) {
  if (!IdleTimeoutOn()) return;
  if (!RolesIdle()) {
    last_work = now;  // work held counts as activity: the quiet time starts when it ends
    return;
  }
  if (now - last_work < config.idle_timeout) return;
  DirectSend(protocol::Message(protocol::Disconnect{DisconnectReasonText(PeerDisconnectReason::kIdle)}));
  Close(CloseCause::kIdle, "closed after " + FormatDuration(config.idle_timeout) + " without work",
        /*notify_peer=*/false);  // sent just above, with the fixed reason rather than this text
}

std::optional<TimePoint> PeerSession::Impl::NextDeadline() const {
  if (state == State::kClosed || !started) return std::nullopt;
  TimePoint next = TimePoint::max();
  if (!awaiting_transport) {
    next = std::min(last_receive + config.liveness_timeout, last_send + config.ping_interval);
    if (state == State::kHandshaking) next = std::min(next, started_at + config.handshake_timeout);
    if (IdleTimeoutOn() && RolesIdle()) next = std::min(next, last_work + config.idle_timeout);
  }
  for (const std::optional<TimePoint>& role : {client->NextDeadline(), server->NextDeadline()})
    if (role) next = std::min(next, *role);
  if (next == TimePoint::max()) return std::nullopt;  // awaiting the transport with no work
  return next;
}

// Closed with nothing of ours served and another connection to the same
// peer to take the work: this node settled a duplicate, or the peer said
// "duplicate" or "idle" (its end held no work, so what we sent crossed its
// disconnect unserved) after it had authenticated (before that, what a
// connection says changes nothing outside it: wire spec section 4, item 6).
// A restart is not this: the old incarnation's work is gone with it.
namespace {
bool Superseded(CloseCause cause, PeerDisconnectReason peer_said, bool ready) {
  if (cause == CloseCause::kDuplicate) return true;
  const bool graceful = peer_said == PeerDisconnectReason::kDuplicate || peer_said == PeerDisconnectReason::kIdle;
  return cause == CloseCause::kPeerDisconnected && graceful && ready;
}
}  // namespace

void PeerSession::Impl::Close(CloseCause cause, const std::string& reason, bool notify_peer, JobFailure failure) {
  if (state == State::kClosed) return;
  // Results the roles already hold are collected first, so the roles' Close
  // reports only what is still open and no job is reported twice.
  Append(closed_results.loads, client->TakeResults());
  Append(closed_results.checksum_failures, client->TakeChecksumFailures());
  Append(closed_results.stores, server->TakeStoreResults());
  Append(closed_results.new_fetch_ids, server->TakeNewFetchIds());
  Append(closed_results.ended_fetch_ids, server->TakeEndedFetchIds());
  closed_results.round_events += server->TakeRoundEvents();
  if (notify_peer) DirectSend(protocol::Message(protocol::Disconnect{CapReason(reason)}));
  hands_back_work = Superseded(cause, peer_disconnect_reason, state == State::kReady);
  if (hands_back_work) closed_results.unserved = client->TakeUnservedWork();
  state = State::kClosed;
  close_cause = cause;
  close_reason = reason.empty() ? "closed" : reason;
  queued.clear();  // their work fails below
  ping_nonce.reset();
  ClientCloseResult client_result = client->Close(close_reason, failure);
  Append(closed_results.loads, std::move(client_result.failed_loads));
  Append(closed_results.failed_request_ids, std::move(client_result.failed_request_ids));
  Append(closed_results.stores, server->Close(close_reason, failure));
}

SessionResults PeerSession::Impl::TakeResults() {
  SessionResults results = std::move(closed_results);
  closed_results = {};
  if (state == State::kClosed) return results;
  Append(results.loads, client->TakeResults());
  Append(results.checksum_failures, client->TakeChecksumFailures());
  Append(results.stores, server->TakeStoreResults());
  Append(results.new_fetch_ids, server->TakeNewFetchIds());
  Append(results.ended_fetch_ids, server->TakeEndedFetchIds());
  results.round_events += server->TakeRoundEvents();
  return results;
}

// ---------------------------------------------------------------------------

PeerSession::PeerSession(SessionConfig config, Clock clock, SendFn send, PublishedBlocks& index,
                         std::string expected_peer_id)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(clock), std::move(send), index,
                                   std::move(expected_peer_id))) {}

PeerSession::~PeerSession() = default;

void PeerSession::Start() { impl_->Start(); }
void PeerSession::StartAwaitingTransport() {
  impl_->Start();
  impl_->awaiting_transport = impl_->started && impl_->state != State::kClosed;
}
void PeerSession::TransportUp() { impl_->TransportUp(); }
PeerSession::State PeerSession::state() const { return impl_->state; }

uint32_t PeerSession::MaxInboundHeaderLen() const {
  return ready() ? protocol::kMaxHeaderLen : protocol::kMaxHeaderLenBeforeReady;
}

uint64_t PeerSession::MaxInboundPayloadLen() const {
  return ready() ? protocol::kMaxPayloadLen : protocol::kMaxPayloadLenBeforeReady;
}

bool PeerSession::authentication_failed() const { return impl_->handshake.failure() == CloseCause::kAuthentication; }

const std::string& PeerSession::authentication_detail() const { return impl_->handshake.failure_detail(); }

bool PeerSession::peer_refused_authentication() const {
  return impl_->close_cause == CloseCause::kPeerDisconnected &&
         impl_->peer_disconnect_reason == PeerDisconnectReason::kAuthenticationFailed;
}

bool PeerSession::FeatureOn(std::string_view name) const { return ready() && impl_->handshake.FeatureOn(name); }

const std::vector<std::string>& PeerSession::features_on() const {
  static const std::vector<std::string> kNone;
  return ready() ? impl_->handshake.features_on() : kNone;
}
bool PeerSession::dialled_locally() const { return !impl_->expected_peer_id.empty(); }
const std::optional<protocol::Connect>& PeerSession::peer_connect() const { return impl_->handshake.peer_connect(); }
const std::string& PeerSession::peer_id() const { return impl_->peer_id; }
const std::string& PeerSession::close_reason() const { return impl_->close_reason; }
CloseCause PeerSession::close_cause() const { return impl_->close_cause; }
bool PeerSession::hands_back_work() const { return impl_->hands_back_work; }
PeerDisconnectReason PeerSession::peer_disconnect_reason() const { return impl_->peer_disconnect_reason; }
const SessionCounters& PeerSession::counters() const { return impl_->counters; }
std::optional<Duration> PeerSession::rtt() const { return impl_->rtt; }

Status PeerSession::OnMessage(const protocol::Message& message) { return impl_->Dispatch(message); }

Status PeerSession::OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan) {
  return impl_->OnBlockDataHeader(message, plan);
}

void PeerSession::OnBlockDataComplete(const protocol::BlockData& message) {
  // After close the load has already failed; its slots are no longer ours to report on.
  // Before ready no block_data header was accepted (OnBlockDataHeader
  // refuses it), so there is no load to report on.
  if (impl_->state != State::kReady) return;
  impl_->Received();  // a long payload is traffic too
  impl_->client->OnBlockDataComplete(message);
}

bool PeerSession::OpenFrameAbandoned() const {
  return impl_->state != State::kClosed && impl_->client->OpenFrameAbandoned();
}

void PeerSession::AbandonOpenFrame() {
  if (impl_->state != State::kClosed) impl_->client->AbandonOpenFrame();
}

void PeerSession::FailOpenFrame(const std::string& reason) {
  if (impl_->state != State::kClosed) impl_->client->FailOpenFrame(reason);
}

void PeerSession::OnTick() { impl_->OnTick(); }
std::optional<TimePoint> PeerSession::NextDeadline() const { return impl_->NextDeadline(); }

bool PeerSession::ProduceDataFrame() { return ready() && impl_->server->ProduceDataFrame(); }
bool PeerSession::HasDataToSend() const { return ready() && impl_->server->HasDataToSend(); }
void PeerSession::OnDataFrameTorn(const protocol::BlockData& frame, const std::string& reason) {
  if (impl_->state != State::kClosed) impl_->server->OnDataFrameTorn(frame.kv_request_id, frame.round_seq, reason);
}

ProbeAnswer PeerSession::RegisterLookup(const std::string& kv_request_id, const protocol::Key& key) {
  // A dead peer holds nothing: the engine recomputes (spec section 1).
  if (impl_->state == State::kClosed) return ProbeAnswer::kMiss;
  return impl_->client->RegisterLookup(kv_request_id, key);
}

void PeerSession::RegisterLookups(const std::string& kv, const std::vector<protocol::Key>& keys,
                                  std::vector<ProbeAnswer>* out) {
  if (impl_->state != State::kClosed) return impl_->client->RegisterLookups(kv, keys, out);
  out->insert(out->end(), keys.size(), ProbeAnswer::kMiss);  // closed: as RegisterLookup
}
size_t PeerSession::FlushPendingLookups() {
  if (impl_->state == State::kClosed) return 0;
  return impl_->client->FlushPendingLookups();
}

Status PeerSession::RequestBlocks(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                                  std::vector<protocol::SlotIndex> block_indexes, SlotSinkRef sink,
                                  std::optional<Duration> timeout) {
  // Refused like any other invalid call: the caller learns it now and no
  // result is owed for a job that never started.
  if (impl_->state == State::kClosed) return Status::Unavailable("session closed: " + impl_->close_reason);
  return impl_->client->RequestBlocks(job_id, kv_request_id, std::move(keys), std::move(block_indexes), std::move(sink),
                                      timeout);
}

void PeerSession::AddSupply(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                            std::vector<PinRef> blocks) {
  if (impl_->state == State::kClosed) {
    // The job has no other way to end; its pins drop with `blocks`.
    impl_->closed_results.stores.push_back({job_id, kv_request_id, false, "session closed: " + impl_->close_reason});
    return;
  }
  impl_->server->AddSupply(job_id, kv_request_id, std::move(keys), std::move(blocks));
}

void PeerSession::Finish(const std::string& kv_request_id) {
  FinishClient(kv_request_id);
  FinishServer(kv_request_id);
}

void PeerSession::FinishClient(const std::string& kv_request_id) {
  if (impl_->state == State::kClosed) return;
  impl_->client->Finish(kv_request_id);
}

void PeerSession::FinishServer(const std::string& kv_request_id) {
  if (impl_->state == State::kClosed) return;
  impl_->server->Finish(kv_request_id);
}

void PeerSession::NoteBytesReceived() { impl_->Received(); }
void PeerSession::NoteWritesPending() { impl_->last_work = impl_->clock(); }

SessionResults PeerSession::TakeResults() { return impl_->TakeResults(); }
void PeerSession::Close(CloseCause cause, const std::string& reason, bool notify_peer, JobFailure failure) {
  impl_->Close(cause, reason, notify_peer, failure);
}
size_t PeerSession::LoadsInFlight() const { return impl_->client->LoadsInFlight(); }
size_t PeerSession::RoundsServing() const { return impl_->server->RoundsServing(); }
bool PeerSession::ServesRequest(const std::string& kv_request_id) const {
  return impl_->state != State::kClosed && impl_->server->Serves(kv_request_id);
}
size_t PeerSession::RoundsOpen() const { return impl_->server->RoundsOpen(); }
uint64_t PeerSession::RoundsRefused() const { return impl_->server->RoundsRefused(); }
uint64_t PeerSession::RoundKeyBytes() const { return impl_->server->RoundKeyBytes(); }
size_t PeerSession::ProbesWith(const std::string& kv_request_id, const std::vector<protocol::Key>& keys) const {
  if (impl_->state == State::kClosed) return 0;  // RegisterLookup answers miss and holds nothing
  return impl_->client->ProbesWith(kv_request_id, keys);
}

}  // namespace kvpeer::session
