// PeerSession: one connection to one peer node, carrying a ClientRole (we
// fetch from the peer) and a ServerRole (we serve the peer).
//
// It owns the handshake (connect / connect_ack with wire version, block_len,
// fingerprint, hash seed, epoch, nonce, and the PSK proof of wire spec
// section 5), gates the roles' frames until ready and then flushes them in
// order, validates and dispatches inbound frames, runs ping/pong liveness
// and the handshake deadline on the injected clock, and turns the end of
// the connection into exactly one result per outstanding job.
//
// A protocol violation (a role returns kViolation, a connect after ready, a
// mismatched setting, a failed proof) sends disconnect{reason} and closes
// the session; the daemon then closes the socket. Unknown message types are
// ignored and counted.
//
// READY MEANS AUTHENTICATED (wire spec 1.1 section 4, steps 5 and 6). A
// session is ready() only once it has sent its connect_ack and accepted the
// peer's valid connect_ack, which with a PSK carried a valid proof (the
// acks are ordered: see handshake.h). Callers rely on this contract: until
// ready(), nothing the connection said may change state outside it. In
// particular peer_connect() and peer_id() of an accepted connection are
// only the peer's unverified claim before ready(): use them for nothing
// but this connection's own logging (no peer entry, no arbitration against
// another session, no per-peer counting) until ready() is true. Before
// ready the session also enforces the pre-ready frame rules of section 2:
// only connect, connect_ack, disconnect, ping and pong, with the lengths
// MaxInboundHeaderLen() / MaxInboundPayloadLen() that the connection must
// apply to its frame decoder before each frame.
//
// Which of two connections to the same peer survives is decided by
// ArbitrateConnections (connection_arbiter.h), from facts this class
// exposes (peer_connect(), ready(), dialled_locally()).
//
// Thread-safety: none; driven from one event loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.h"
#include "base/random_token.h"
#include "base/status.h"
#include "session/client_role.h"
#include "session/close_cause.h"
#include "session/internal/handshake.h"
#include "session/peer_disconnect_reason.h"
#include "session/server_role.h"
#include "session/session_types.h"
#include "session/unserved_work.h"

namespace kvpeer::session {

struct SessionConfig {
  std::string local_id;  // our node_id, "host:port"
  uint64_t block_len = 0;
  std::string config_fingerprint;
  std::string hash_seed;
  std::string epoch;               // 32 lowercase hex digits, this daemon incarnation
  std::optional<std::string> psk;  // pre-shared key bytes, when authentication is on
  // Features offered in our connect (wire spec section 7; docs/wire-protocol.md,
  // "7.10 Block checksums (1.1, spec section 7)").
  std::vector<std::string> features;
  // What the transport proves of the peer's identity (its TLS
  // certificate), checked against the peer_id of its connect; empty for
  // plain TCP. See Handshake::OnConnect.
  IdentityCheck identity_check;
  Duration handshake_timeout = std::chrono::seconds(10);
  Duration ping_interval = std::chrono::seconds(2);
  Duration liveness_timeout = std::chrono::seconds(10);
  // A ready session that holds no work in either role and has carried no
  // frame but ping and pong for this long closes itself with
  // disconnect{reason:"idle"} (CloseCause::kIdle); 0 = never. The daemon
  // redials on the next work (docs/operations.md, "Idle peer connections").
  Duration idle_timeout = Duration::zero();
  ClientConfig client;
  ServerConfig server;  // server.block_len is taken from block_len
  // REQUIRED (the constructor throws std::logic_error without it): fresh
  // nonces, 16 random bytes as 32 lowercase hex digits (base/random_token.h).
  // When it fails the session closes instead of sending a predictable one.
  TokenSource random_token;
};

// Everything finished since the last TakeResults().
struct SessionResults {
  std::vector<JobResult> loads;
  std::vector<JobResult> stores;
  std::vector<std::string> failed_request_ids;
  std::vector<std::string> new_fetch_ids;
  // Request ids whose serving ended (ServerRole::TakeEndedFetchIds): the
  // daemon drops their supply binding to this session unless ServesRequest.
  std::vector<std::string> ended_fetch_ids;
  // Blocks that failed the xxh3 check (their loads are among `loads`, failed).
  std::vector<ChecksumFailure> checksum_failures;
  // The server role's round timeouts and key-byte refusals (ServerRole::TakeRoundEvents).
  RoundEvents round_events;
  // What a session closed in favour of another connection to the same peer
  // handed back instead of failing (hands_back_work()): the daemon asks
  // the peer again for it over the connection that took this one's place.
  UnservedWork unserved;
};

struct SessionCounters {
  uint64_t unknown_types = 0;
  uint64_t frames_received = 0;
  uint64_t frames_sent = 0;
};

class PeerSession {
 public:
  enum class State { kHandshaking, kReady, kClosed };

  // `expected_peer_id` is the peer we dialled (empty for an accepted
  // connection, whose peer is known only from its connect).
  PeerSession(SessionConfig config, Clock clock, SendFn send, PublishedBlocks& index,
              std::string expected_peer_id = {});
  ~PeerSession();

  PeerSession(const PeerSession&) = delete;
  PeerSession& operator=(const PeerSession&) = delete;

  // Sends our connect. Call once, first.
  void Start();
  // A dialled connection whose socket is not made yet (its peer's name is
  // being resolved): Start, but the handshake deadline, liveness and pings
  // wait for TransportUp, so a slow name costs the handshake nothing; work
  // may queue meanwhile and its own timeouts still run.
  void StartAwaitingTransport();
  // The TCP connect begins: the handshake deadline runs from now.
  void TransportUp();

  State state() const;
  // Ready == authenticated; see the contract at the top of this file.
  bool ready() const { return state() == State::kReady; }
  // The inbound frame limits right now (wire spec section 2): 64 KiB of
  // header and no payload until ready, then the protocol's maxima. Apply to
  // the FrameDecoder (SetMaxLengths) before each frame's prefix.
  uint32_t MaxInboundHeaderLen() const;
  uint64_t MaxInboundPayloadLen() const;
  // The handshake failed on a missing or wrong proof, or on a peer_id the
  // transport's identity does not vouch for (this end sent "authentication
  // failed"); for counting without parsing reasons.
  bool authentication_failed() const;
  // After an identity mismatch: what did not match, for the log.
  const std::string& authentication_detail() const;
  // The peer closed the session with disconnect{reason:"authentication
  // failed"}: it refused our proof (or identity).
  bool peer_refused_authentication() const;
  // The features on for this connection: both connects listed them. Empty
  // (and FeatureOn false) until ready.
  bool FeatureOn(std::string_view name) const;
  const std::vector<std::string>& features_on() const;
  bool dialled_locally() const;
  // The peer's validated connect, once received.
  const std::optional<protocol::Connect>& peer_connect() const;
  // The peer's node id: the dialled one, or the one its connect named.
  const std::string& peer_id() const;
  // Why the session closed, for people (empty while open): logs and
  // status; never parsed.
  const std::string& close_reason() const;
  // Why the session closed, for counting (kOpen while open).
  CloseCause close_cause() const;
  // The session closed in favour of another connection to the same peer
  // (this node closed it as a duplicate, or the authenticated peer did, or
  // the peer closed it as idle), so its unserved work was handed back
  // (SessionResults::unserved) and its lookups are to be asked again rather
  // than ended. docs/wire-protocol.md, section 9, "(f) Work on a superseded
  // connection".
  bool hands_back_work() const;
  // What the peer's disconnect said, when close_cause() is
  // kPeerDisconnected (kUnspecified otherwise).
  PeerDisconnectReason peer_disconnect_reason() const;
  const SessionCounters& counters() const;
  // Last ping round trip, once measured.
  std::optional<Duration> rtt() const;

  // Inbound frames other than block_data. A non-ok Status means the session
  // has closed (a disconnect was sent when the reason is a violation).
  Status OnMessage(const protocol::Message& message);
  // Inbound block_data: the plan says where the payload goes. A non-ok
  // Status is a violation (the session has closed).
  Status OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan);
  void OnBlockDataComplete(const protocol::BlockData& message);
  // See ClientRole::OpenFrameAbandoned and AbandonOpenFrame.
  bool OpenFrameAbandoned() const;
  void AbandonOpenFrame();
  void FailOpenFrame(const std::string& reason);
  // Payload bytes of a block_data frame arrived: the peer is not silent even
  // while one large frame takes longer than the liveness timeout.
  void NoteBytesReceived();
  // The transport still has frames of this session to write (a transfer_done
  // queued behind a large data frame, say): that is work, so the idle close
  // waits (SessionConfig::idle_timeout). Call before OnTick.
  void NoteWritesPending();

  // Timers: handshake deadline, ping, liveness, idle timeout, role timeouts.
  void OnTick();
  std::optional<TimePoint> NextDeadline() const;

  // See ServerRole::ProduceDataFrame. Never produces before ready.
  bool ProduceDataFrame();
  bool HasDataToSend() const;
  // See ServerRole::OnDataFrameTorn. Call before the next ProduceDataFrame.
  void OnDataFrameTorn(const protocol::BlockData& frame, const std::string& reason);

  // Engine-facing operations, forwarded to the roles. Before ready their
  // frames are queued; after close they fail at once.
  ProbeAnswer RegisterLookup(const std::string& kv_request_id, const protocol::Key& key);
  void RegisterLookups(const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                       std::vector<ProbeAnswer>* answers);
  size_t FlushPendingLookups();
  // `timeout`: ClientRole::RequestBlocks.
  Status RequestBlocks(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                       std::vector<protocol::SlotIndex> block_indexes, SlotSinkRef sink,
                       std::optional<Duration> timeout = std::nullopt);
  void AddSupply(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                 std::vector<PinRef> blocks);
  // Client and server roles both finish the request.
  void Finish(const std::string& kv_request_id);
  // Only the consumer half (our loads and probes of the request on this
  // peer) or only the producer half (what we serve this peer for it): a
  // node's engines each own their own half of a request id.
  void FinishClient(const std::string& kv_request_id);
  void FinishServer(const std::string& kv_request_id);

  SessionResults TakeResults();

  // Ends the session for `cause`: sends disconnect{reason} when
  // `notify_peer`, then ends every load and store job with a failure result
  // (returned by the next TakeResults, together with the failed request
  // ids); failed loads count as `failure` (kShutdown when the node stops).
  // Exception: when the close hands back work (hands_back_work()), the
  // loads the peer never served leave without a result, in
  // SessionResults::unserved, and their one result is owed by whoever asks
  // for them again. Idempotent: the first cause and reason stay.
  void Close(CloseCause cause, const std::string& reason, bool notify_peer = true,
             JobFailure failure = JobFailure::kSessionClosed);

  size_t LoadsInFlight() const;
  size_t RoundsServing() const;
  // Server role: it holds a round or a store job of this request opened by a
  // fetch or supply (false once closed). See ServerRole::Serves.
  bool ServesRequest(const std::string& kv_request_id) const;
  // Server role: every open round, and the lookups and fetches refused
  // because config.server.max_rounds were open (ServerConfig::max_rounds).
  size_t RoundsOpen() const;
  uint64_t RoundsRefused() const;
  // Server role: key bytes of the open rounds (ServerConfig::max_round_key_bytes).
  uint64_t RoundKeyBytes() const;
  // Client role: see ClientRole::ProbesWith (0 once closed).
  size_t ProbesWith(const std::string& kv_request_id, const std::vector<protocol::Key>& keys) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpeer::session
