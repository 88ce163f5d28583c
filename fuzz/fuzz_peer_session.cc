// libFuzzer target: a live PeerSession driven by random frame sequences.
//
// The fuzzer plays the remote peer and the local daemon at once. The input is
// a setup byte (dialled or accepted, PSK or not, how the handshake goes,
// frame size, liveness timeout, round limit) followed by a stream of operations, each an
// opcode byte and its argument bytes:
//   * inbound frames: lookup, lookup_resp, fetch, block_data headers (with
//     an xxh3 array, valid, mismatching or malformed, once a connect turned
//     the feature on) and their payloads (written piecewise into the plan's
//     targets, then completed), transfer_done, abort_fetch, abort_ack, ping, pong,
//     disconnect, unknown types, connect and connect_ack (valid or with one
//     field wrong), and raw header JSON from the input. Every inbound message
//     passes EncodeHeader + DecodeHeader first, so the session sees exactly
//     what the wire decoder lets through, as in the daemon;
//   * local operations: RegisterLookup, FlushPendingLookups, RequestBlocks,
//     AddSupply, Finish, Close, publishing and unpublishing index keys;
//   * clock jumps with OnTick, ProduceDataFrame pulls (only when the previous
//     data frame is written, the writer's contract) and writes of queued
//     frames (which drop their pins).
// While a block_data payload is being received, no other inbound frame
// arrives (the daemon's reader is inside the payload), but local operations
// and ticks may interleave, as they do in the daemon.
//
// Properties, each a __builtin_trap() on failure:
//   * every result names a job that is owed one, and no job gets two;
//   * once the session is closed (and the daemon dropped its unwritten
//     frames) every job has exactly one result, no pin is alive, no slot sink
//     is held by the session, and the session refuses new work;
//   * a BlockDataPlan targets exactly the requested, not yet received slots
//     of the load of that round (the sink checks every Slot() call), never
//     a load that already has its result, and no payload byte is written
//     into a load's slots after its result was reported;
//   * a load succeeds only with every destination received;
//   * every frame the session sends passes the wire decoder; role frames
//     leave only after the handshake, nothing leaves a closed session;
//     round tokens of fetches are never reused;
//   * as a server, it sends block_data only for an open fetch, each block to
//     a destination that fetch demanded with the key it demanded, never a
//     block of a store job whose result was already reported, at most one
//     transfer_done per fetch (success only when every block went out), an
//     abort_ack exactly for a first abort_fetch of a round; it answers a
//     published key as a hit (all keys miss when the round limit refuses
//     the lookup) and never holds more rounds than its limit;
//   * a store result is never reported while an unwritten frame reads that
//     job's slots;
//   * OnTick before NextDeadline does nothing, and after OnTick the next
//     deadline lies in the future (a timer loop cannot spin);
//   * OnMessage returns non-ok exactly when the session closed, and never
//     kInternal; ProduceDataFrame sends only when HasDataToSend said so.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "protocol/block_checksum.h"
#include "protocol/codec.h"
#include "protocol/features.h"
#include "protocol/limits.h"
#include "protocol/messages.h"
#include "session/peer_session.h"
#include "session/psk_proof.h"

namespace {

namespace protocol = kvpeer::protocol;
namespace session = kvpeer::session;
using kvpeer::Status;
using protocol::Key;
using protocol::Message;
using protocol::RoundSeq;
using protocol::SlotIndex;
using session::JobId;
using session::PeerSession;
using session::PinRef;
using SessionState = PeerSession::State;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBlockLen = 8;
constexpr uint32_t kRegionBlocks = 16;
constexpr size_t kMaxOps = 1500;
constexpr size_t kMaxRemembered = 32;

constexpr std::string_view kOwnId = "self:7000";
constexpr std::string_view kPeerId = "peer:7000";
constexpr std::string_view kOwnEpoch = "0000000000000000000000000000e0e0";
constexpr std::string_view kPeerEpoch = "000000000000000000000000000000f1";
constexpr std::string_view kPeerNonce = "00000000000000000000000000000abc";
constexpr std::string_view kFingerprint = "fp-1";
constexpr std::string_view kHashSeed = "seed-1";
constexpr std::string_view kPsk = "pre-shared key";
constexpr std::string_view kKvIds[] = {"r0", "r1", "r2", "r3"};

void Check(bool property) {
  if (!property) __builtin_trap();
}

// KVPEER_FUZZ_TRACE=1 prints every operation, frame and result (for
// reading a reproducer; the fuzzer itself runs silent).
const bool kTrace = std::getenv("KVPEER_FUZZ_TRACE") != nullptr;

std::string Token(uint64_t n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", 0x5eedull, static_cast<unsigned long long>(n));
  return buf;
}

// Ten raw keys; the last is long, so messages that quote keys cut them.
Key KeyOf(size_t i) {
  if (i % 10 == 9) return Key(40, '\x9c');
  return Key{'k', static_cast<char>('0' + i % 10)};
}

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  size_t Below(size_t n) { return n == 0 ? 0 : Byte() % n; }
  bool Flag() { return (Byte() & 1) != 0; }
  std::string Text(size_t max) {
    const size_t n = std::min(Below(max + 1), size_ - std::min(pos_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// ---- the local node: one region, its index, pins that count themselves ----

struct Region {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kRegionBlocks * kBlockLen, 0x11);
  int live_pins = 0;
};

class FuzzPin : public session::PinnedBlock {
 public:
  FuzzPin(Region& region, uint32_t index, Key key, std::optional<JobId> job)
      : region_(region), index_(index % kRegionBlocks), key_(std::move(key)), job_(job) {
    ++region_.live_pins;
  }
  ~FuzzPin() override { --region_.live_pins; }
  std::span<const uint8_t> bytes() const override { return {region_.bytes.data() + index_ * kBlockLen, kBlockLen}; }
  const Key& key() const { return key_; }
  const std::optional<JobId>& job() const { return job_; }

 private:
  Region& region_;
  uint32_t index_;
  Key key_;
  std::optional<JobId> job_;  // the store job that supplied it; none for a lookup pin
};

class Index : public session::PublishedBlocks {
 public:
  explicit Index(Region& region) : region_(region) {}
  PinRef PinIfPublished(const Key& key) override {
    auto it = published.find(key);
    if (it == published.end()) return nullptr;
    return std::make_shared<FuzzPin>(region_, it->second, key, std::nullopt);
  }
  std::map<Key, uint32_t> published;

 private:
  Region& region_;
};

// One load's destination: slots are created on demand, and asking for a slot
// the load did not name is a property violation.
class Sink : public session::SlotSink {
 public:
  explicit Sink(const std::vector<SlotIndex>& requested) : requested_(requested.begin(), requested.end()) {}
  std::span<uint8_t> Slot(SlotIndex index) override {
    Check(requested_.contains(index));
    std::vector<uint8_t>& slot = slots_[index];
    if (slot.empty()) slot.assign(kBlockLen, 0);
    return slot;
  }
  const uint8_t* Address(SlotIndex index) const {
    auto it = slots_.find(index);
    return it == slots_.end() ? nullptr : it->second.data();
  }

 private:
  std::set<SlotIndex> requested_;
  std::map<SlotIndex, std::vector<uint8_t>> slots_;
};

// ---- what the harness knows ------------------------------------------------

struct LoadModel {
  std::string kv;
  std::vector<SlotIndex> indexes;
  std::shared_ptr<Sink> sink;
  std::optional<RoundSeq> round;  // known once its fetch left
  std::set<SlotIndex> received;
  bool aborted = false;  // abort_fetch left for its round
  bool has_result = false;
};

struct StoreModel {
  std::string kv;
  bool has_result = false;
};

using RoundKey = std::pair<std::string, RoundSeq>;

// A round this session serves us: open from our non-empty fetch until its
// terminal. `owed` is the (destination, key) pairs not sent yet.
struct ServedRound {
  bool demand = false;
  std::multiset<std::pair<SlotIndex, Key>> owed;
};

// A block_data frame whose header the session accepted and whose payload
// we are writing.
struct OpenFrame {
  protocol::BlockData header;
  session::BlockDataPlan plan;
  std::optional<JobId> job;  // the load it fills; none when discarded
  size_t total = 0;
  size_t written = 0;
};

enum Op : uint8_t {
  kInLookup,
  kInLookupResp,
  kInFetch,
  kInBlockData,
  kPayload,
  kInTransferDone,
  kInAbortFetch,
  kInAbortAck,
  kInPing,
  kInPong,
  kInDisconnect,
  kInUnknown,
  kInConnect,
  kInConnectAck,
  kInRawHeader,
  kRegisterLookup,
  kFlush,
  kRequestBlocks,
  kAddSupply,
  kFinish,
  kClockTick,
  kProduce,
  kWrite,
  kPublish,
  kClose,
  kOpCount,
};

class Harness {
 public:
  explicit Harness(Input& in) : in_(in) {}
  void Run();

 private:
  // setup and inbound frames
  void Setup();
  protocol::Connect PeerConnect(uint8_t variant) const;
  protocol::ConnectAck PeerConnectAck(uint8_t variant) const;
  std::string PeerProof(std::string_view psk) const;
  void Deliver(const Message& message);
  void DeliverDecoded(const Message& message);
  Status Dispatch(const Message& message, bool role);
  void Inbound(const protocol::Connect& m);
  void Inbound(const protocol::ConnectAck& m);
  void Inbound(const protocol::Disconnect& m);
  void Inbound(const protocol::Ping& m);
  void Inbound(const protocol::Pong& m);
  void Inbound(const protocol::Lookup& m);
  void Inbound(const protocol::LookupResp& m);
  void Inbound(const protocol::Fetch& m);
  void Inbound(const protocol::BlockData& m);
  bool ChecksumsOn() const;
  protocol::BlockChecksums PickChecksums(size_t blocks);
  void Inbound(const protocol::TransferDone& m);
  void Inbound(const protocol::AbortFetch& m);
  void Inbound(const protocol::AbortAck& m);
  void Inbound(const protocol::Unknown& m);
  void WritePayload();

  // outbound frames
  void OnSent(session::OutFrame frame);
  void Observe(const session::OutFrame& frame);

  // local operations
  void Step(uint8_t op);
  void RequestBlocks();
  void AddSupply();
  void ClockTick();
  void Produce();

  // results and the closed state
  void Collect();
  void CheckClosed();
  void Finally();

  // argument pickers
  std::string PickKv();
  Key PickKey() { return KeyOf(in_.Byte()); }
  RoundKey PickClientRound();
  RoundKey PickServerRound();
  std::vector<Key> PickKeys(size_t max);
  bool closed() const { return session_->state() == SessionState::kClosed; }
  template <typename T>
  static void Remember(std::vector<T>& list, T item) {
    list.push_back(std::move(item));
    if (list.size() > kMaxRemembered) list.erase(list.begin());
  }

  Input& in_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  Region region_;
  Index index_{region_};
  bool dialled_ = false;
  bool psk_ = false;
  size_t max_rounds_ = 0;                          // the server role's round limit (0 = none)
  std::optional<protocol::Connect> peer_connect_;  // the connect the session accepted
  std::optional<protocol::Connect> own_connect_;
  std::optional<std::string> last_ping_nonce_;  // the session's, for pong

  std::map<JobId, LoadModel> loads_;
  std::map<JobId, StoreModel> stores_;
  std::deque<JobId> fetch_owed_;  // loads whose fetch has not left yet, in order
  std::map<RoundSeq, JobId> load_by_round_;
  std::set<RoundSeq> fetch_rounds_;                // every round a non-empty fetch of ours used
  std::vector<protocol::Lookup> session_lookups_;  // the session's lookups, newest last
  std::vector<RoundKey> client_rounds_;            // rounds of the session's lookups and fetches
  std::set<std::string> fetched_kvs_;              // kv ids we fetched from the session
  std::map<RoundKey, ServedRound> served_;
  std::set<RoundKey> acked_;  // abort_ack tombstones, as the server keeps them
  JobId next_job_ = 1;

  // What the session sent during the current call.
  size_t sent_frames_ = 0;
  std::optional<protocol::LookupResp> sent_lookup_resp_;
  std::optional<protocol::Pong> sent_pong_;
  size_t sent_abort_acks_ = 0;
  size_t sent_connect_acks_ = 0;

  bool closed_seen_ = false;
  std::optional<OpenFrame> open_frame_;
  // Declared after the region and before the session: destroyed after the
  // session, before the region, so every pin dies while its region lives.
  std::deque<session::OutFrame> wire_;  // sent, not yet written
  std::unique_ptr<PeerSession> session_;
};

// ---- setup -------------------------------------------------------------------

void Harness::Setup() {
  const uint8_t mode = in_.Byte();
  dialled_ = (mode & 1) != 0;
  psk_ = (mode & 2) != 0;
  session::SessionConfig config;
  config.local_id = std::string(kOwnId);
  config.block_len = kBlockLen;
  config.config_fingerprint = std::string(kFingerprint);
  config.hash_seed = std::string(kHashSeed);
  config.epoch = std::string(kOwnEpoch);
  if (psk_) config.psk = std::string(kPsk);
  config.liveness_timeout = (mode & 0x10) != 0 ? std::chrono::seconds(10) : std::chrono::seconds(600);
  config.server.max_frame_payload = kBlockLen * (1 + ((mode >> 5) & 3));
  max_rounds_ = (mode & 0x80) != 0 ? 3 : 0;
  config.server.max_rounds = max_rounds_;
  auto counter = std::make_shared<uint64_t>(1);
  config.random_token = [counter] { return Token((*counter)++); };
  // Offered always; on once a connect of the peer lists it too (variant 9).
  config.features = protocol::SupportedFeatures();
  session_ = std::make_unique<PeerSession>(
      std::move(config), [this] { return now_; }, [this](session::OutFrame f) { OnSent(std::move(f)); }, index_,
      dialled_ ? std::string(kPeerId) : std::string());
  session_->Start();
  Check(own_connect_.has_value());
  // Handshake style: 0 complete, 1 connect only, 2 ack before connect, 3 none.
  switch ((mode >> 2) & 3) {
    case 0:
      Deliver(PeerConnect(0));
      Deliver(PeerConnectAck(0));
      Check(session_->ready());
      break;
    case 1:
      Deliver(PeerConnect(0));
      break;
    case 2:
      Deliver(PeerConnectAck(0));
      Check(closed());
      break;
    default:
      break;
  }
  Collect();
}

// variant 0 is the valid connect; others get one thing wrong.
protocol::Connect Harness::PeerConnect(uint8_t variant) const {
  protocol::Connect c;
  c.peer_id = std::string(kPeerId);
  c.epoch = std::string(kPeerEpoch);
  c.block_len = kBlockLen;
  c.config_fingerprint = std::string(kFingerprint);
  c.hash_seed = std::string(kHashSeed);
  c.nonce = std::string(kPeerNonce);
  switch (variant % 10) {
    case 1:
      c.block_len = kBlockLen * 2;
      break;
    case 2:
      c.config_fingerprint = "other";
      break;
    case 3:
      c.hash_seed = "other";
      break;
    case 4:
      c.epoch = std::string(kOwnEpoch);
      break;
    case 5:
      c.peer_id = "other:1";
      break;  // a mismatch only when dialled
    case 6:
      c.wire_minor = 7;
      break;  // compatible
    case 7:
      c.wire_major = 2;
      break;
    case 8:
      c.config_fingerprint = std::string(300, 'x');
      break;
    case 9:
      c.features = {std::string(protocol::kFeatureXxh3), "unknown-feature"};
      break;  // valid: checksums on
    default:
      break;
  }
  return c;
}

// The proof the peer must send under wire 1.1 section 5: made in the peer's
// role (acceptor when we dialled), over both nonces and both ids.
std::string Harness::PeerProof(std::string_view psk) const {
  const std::string nonce = peer_connect_ ? peer_connect_->nonce : std::string(kPeerNonce);
  const std::string id = peer_connect_ ? peer_connect_->peer_id : std::string(kPeerId);
  return session::PskProof(psk, {dialled_ ? session::ProofRole::kAcceptor : session::ProofRole::kDialer,
                                 own_connect_->nonce, nonce, id, kOwnId});
}

protocol::ConnectAck Harness::PeerConnectAck(uint8_t variant) const {
  // The ack of the connect the session accepted (or of the usual one).
  protocol::ConnectAck a;
  a.peer_id = peer_connect_ ? peer_connect_->peer_id : std::string(kPeerId);
  a.epoch = peer_connect_ ? peer_connect_->epoch : std::string(kPeerEpoch);
  if (psk_) a.proof = PeerProof(kPsk);
  switch (variant % 7) {
    case 1:
      a.proof.reset();
      break;
    case 2:
      a.proof = std::string(64, 'a');
      break;
    case 3:
      a.epoch = Token(77);
      break;
    case 4:
      a.peer_id = "other:1";
      break;
    case 5:
      a.wire_major = 3;
      break;
    case 6:
      a.proof = PeerProof("wrong key");
      break;
    default:
      break;
  }
  return a;
}

// ---- inbound frames ----------------------------------------------------------

// As the daemon's reader would: only what the wire decoder accepts reaches
// the session.
void Harness::Deliver(const Message& message) {
  const bool block_data = std::holds_alternative<protocol::BlockData>(message);
  Message decoded;
  const uint64_t payload_len = block_data ? std::get<protocol::BlockData>(message).block_indexes.size() * kBlockLen : 0;
  const std::string header = protocol::EncodeHeader(message);
  if (!protocol::DecodeHeader(header, payload_len, protocol::DecodeContext{kBlockLen}, &decoded).ok()) return;
  // The daemon's decoder refuses a frame beyond the session's inbound limits
  // (wire 1.1 section 2: before ready no payload, 64 KiB of header) from its
  // prefix; nothing of it reaches the session, which closes.
  if (!closed() &&
      (header.size() > session_->MaxInboundHeaderLen() || payload_len > session_->MaxInboundPayloadLen())) {
    session_->Close(session::CloseCause::kMalformedFrame, "frame beyond the inbound limits", true);
    return;
  }
  DeliverDecoded(decoded);
}

void Harness::DeliverDecoded(const Message& message) {
  if (closed() || open_frame_) return;  // the reader stopped, or is inside a payload
  sent_frames_ = 0;
  sent_lookup_resp_.reset();
  sent_pong_.reset();
  sent_abort_acks_ = 0;
  sent_connect_acks_ = 0;
  std::visit([this](const auto& m) { Inbound(m); }, message);
}

Status Harness::Dispatch(const Message& message, bool role) {
  const bool was_ready = session_->ready();
  const Status status = session_->OnMessage(message);
  if (kTrace) {
    std::fprintf(stderr, "  received %s -> %s\n", protocol::EncodeHeader(message).substr(0, 200).c_str(),
                 status.ok() ? "ok" : status.message().c_str());
  }
  Check(status.ok() == !closed());
  Check(status.code() != Status::Code::kInternal);
  if (role && !was_ready) Check(closed());
  return status;
}

void Harness::Inbound(const protocol::Connect& m) {
  const bool first = !peer_connect_;
  const bool acceptable = m.wire_major == protocol::kWireMajor && m.block_len == kBlockLen &&
                          m.config_fingerprint == kFingerprint && m.hash_seed == kHashSeed && m.epoch != kOwnEpoch &&
                          (!dialled_ || m.peer_id == kPeerId) &&
                          (!psk_ || m.wire_minor >= protocol::kMinWireMinorWithPsk);
  const Status status = Dispatch(m, false);
  if (first && acceptable) {
    // Wire 1.1 section 4: a PSK acceptor acks only after the dialer's proof.
    const size_t acks_now = psk_ && !dialled_ ? 0 : 1;
    Check(status.ok() && sent_connect_acks_ == acks_now);
    peer_connect_ = m;
  } else {
    Check(!status.ok() && sent_connect_acks_ == 0);  // a second connect is a violation too
  }
}

void Harness::Inbound(const protocol::ConnectAck& m) {
  const bool was_ready = session_->ready();
  const Status status = Dispatch(m, false);
  if (!peer_connect_) Check(!status.ok());  // an ack must follow the connect
  if (was_ready) Check(!status.ok());       // a second connect_ack is a violation (1.1)
  // A PSK acceptor answers the dialer's accepted proof with its own ack.
  if (status.ok() && psk_ && !dialled_) Check(sent_connect_acks_ == 1);
  if (status.ok() && !was_ready) {
    // Accepted: the session is ready, and accepted only an ack that repeats
    // the connect's identity and carries the right proof.
    Check(session_->ready());
    const std::string& prover = peer_connect_->peer_id;
    if (psk_) Check(m.proof == PeerProof(kPsk));
    Check(m.peer_id == prover && m.epoch == peer_connect_->epoch);
  }
}

void Harness::Inbound(const protocol::Disconnect& m) {
  Dispatch(m, false);
  Check(closed());
}

void Harness::Inbound(const protocol::Ping& m) {
  if (Dispatch(m, false).ok()) Check(sent_pong_ && sent_pong_->nonce == m.nonce);
}

void Harness::Inbound(const protocol::Pong& m) { Dispatch(m, false); }

void Harness::Inbound(const protocol::Unknown& m) {
  const uint64_t before = session_->counters().unknown_types;
  // Before ready an unknown type is a violation (wire 1.1 section 2), like a role message.
  if (Dispatch(m, /*role=*/true).ok()) Check(session_->counters().unknown_types == before + 1);
}

void Harness::Inbound(const protocol::Lookup& m) {
  const uint64_t refused_before = session_->RoundsRefused();
  if (!Dispatch(m, true).ok()) return;
  if (m.keys.empty()) {
    Check(!sent_lookup_resp_);
    return;
  }
  // Answered at once, key for key; a published key is a hit, unless the
  // round limit refused the lookup, which answers every key miss.
  Check(sent_lookup_resp_ && sent_lookup_resp_->kv_request_id == m.kv_request_id &&
        sent_lookup_resp_->round_seq == m.round_seq && sent_lookup_resp_->keys == m.keys &&
        sent_lookup_resp_->hits.size() == m.keys.size());
  const bool refused = session_->RoundsRefused() != refused_before;
  if (refused) Check(max_rounds_ != 0);
  for (size_t i = 0; i < m.keys.size(); ++i) {
    if (refused)
      Check(!sent_lookup_resp_->hits[i]);
    else if (index_.published.contains(m.keys[i]))
      Check(sent_lookup_resp_->hits[i]);
  }
}

void Harness::Inbound(const protocol::LookupResp& m) { Dispatch(m, true); }

void Harness::Inbound(const protocol::Fetch& m) {
  const RoundKey key{m.kv_request_id, m.round_seq};
  bool duplicate = false;
  if (session_->ready()) {
    if (m.keys.empty()) {
      // The terminal empty fetch clears the request's tombstones.
      std::erase_if(acked_, [&](const RoundKey& k) { return k.first == m.kv_request_id; });
    } else if (!acked_.contains(key)) {
      ServedRound& round = served_[key];
      duplicate = round.demand;
      if (!duplicate) {
        round.demand = true;
        round.owed.clear();
        for (size_t i = 0; i < m.keys.size(); ++i) round.owed.emplace(m.block_indexes[i], m.keys[i]);
        fetched_kvs_.insert(m.kv_request_id);
      }
    }
  }
  const Status status = Dispatch(m, true);
  if (duplicate) Check(!status.ok());
}

void Harness::Inbound(const protocol::AbortFetch& m) {
  const RoundKey key{m.kv_request_id, m.round_seq};
  const bool first = !acked_.contains(key);
  if (!Dispatch(m, true).ok()) return;
  Check(sent_abort_acks_ == (first ? 1u : 0u));
}

void Harness::Inbound(const protocol::TransferDone& m) { Dispatch(m, true); }

void Harness::Inbound(const protocol::AbortAck& m) { Dispatch(m, true); }

void Harness::Inbound(const protocol::BlockData& m) {
  const bool was_ready = session_->ready();
  session::BlockDataPlan plan;
  plan.targets.push_back({});  // stale content the session must replace
  const Status status = session_->OnBlockDataHeader(m, &plan);
  if (kTrace) {
    std::fprintf(stderr, "  received %s -> %s%s\n", protocol::EncodeHeader(m).c_str(),
                 status.ok() ? "ok" : status.message().c_str(), plan.discard ? " (discard)" : "");
  }
  Check(status.ok() == !closed());
  Check(status.code() != Status::Code::kInternal);
  if (!was_ready) Check(closed());
  if (!status.ok()) return;
  OpenFrame frame{m, std::move(plan), std::nullopt, m.block_indexes.size() * kBlockLen, 0};
  auto by_round = load_by_round_.find(m.round_seq);
  Check(by_round != load_by_round_.end());  // only a load's round is accepted
  LoadModel& load = loads_.at(by_round->second);
  Check(load.kv == m.kv_request_id);
  if (frame.plan.discard) {
    Check(frame.plan.targets.empty() && load.aborted);
  } else {
    Check(!load.aborted && !load.has_result);
    Check(frame.plan.targets.size() == m.block_indexes.size());
    std::set<SlotIndex> in_frame;
    for (size_t i = 0; i < m.block_indexes.size(); ++i) {
      const SlotIndex index = m.block_indexes[i];
      Check(std::find(load.indexes.begin(), load.indexes.end(), index) != load.indexes.end());
      Check(!load.received.contains(index) && in_frame.insert(index).second);
      Check(frame.plan.targets[i].size() == kBlockLen && frame.plan.targets[i].data() == load.sink->Address(index));
    }
    frame.job = by_round->second;
  }
  open_frame_ = std::move(frame);
}

// Writes the next piece of the open frame's payload into its targets (or
// drops it, for a discarded frame); the last piece completes the frame.
void Harness::WritePayload() {
  if (!open_frame_) return;
  OpenFrame& frame = *open_frame_;
  const uint8_t b = in_.Byte();
  const size_t piece = b == 0 ? frame.total - frame.written : std::min<size_t>(b, frame.total - frame.written);
  if (frame.job) {
    // No byte lands in a load's slots once its result is out.
    Check(!loads_.at(*frame.job).has_result);
    size_t offset = frame.written;
    for (size_t left = piece; left > 0;) {
      std::span<uint8_t> target = frame.plan.targets[offset / kBlockLen];
      const size_t at = offset % kBlockLen;
      const size_t n = std::min(left, kBlockLen - at);
      std::fill_n(target.data() + at, n, static_cast<uint8_t>(b | 1));
      offset += n;
      left -= n;
    }
  }
  frame.written += piece;
  if (frame.written < frame.total) return;
  const OpenFrame done = std::move(frame);
  open_frame_.reset();
  session_->OnBlockDataComplete(done.header);
  if (done.job) {
    LoadModel& load = loads_.at(*done.job);
    load.received.insert(done.header.block_indexes.begin(), done.header.block_indexes.end());
  }
}

bool Harness::ChecksumsOn() const {
  const std::vector<std::string>& on = session_->features_on();
  return std::find(on.begin(), on.end(), protocol::kFeatureXxh3) != on.end();
}

// block_data.xxh3 while the feature is on (wire 1.1 section 7): absent or
// of the wrong length (violations), the checksum of a block that
// WritePayload fills in one piece (byte 0x01: those loads can succeed), or
// values from the input (mismatches: the load fails, the session goes on).
protocol::BlockChecksums Harness::PickChecksums(size_t blocks) {
  const uint8_t mode = in_.Byte();
  std::vector<uint64_t> values;
  switch (mode % 4) {
    case 0:
      return {};
    case 1:
      values.resize(blocks + 1 + (mode >> 7));
      break;
    case 2: {
      const std::vector<uint8_t> filled(kBlockLen, 0x01);
      values.assign(blocks, protocol::BlockChecksum(std::as_bytes(std::span(filled))));
      break;
    }
    default:
      for (size_t i = 0; i < blocks; ++i) values.push_back(uint64_t{in_.Byte()} << 56 | in_.Byte());
      break;
  }
  return protocol::BlockChecksums::Of(std::move(values));
}

// ---- outbound frames ---------------------------------------------------------

void Harness::OnSent(session::OutFrame frame) {
  Check(session_ != nullptr && !closed());  // nothing leaves a closed session
  if (kTrace) std::fprintf(stderr, "  sent %s\n", protocol::EncodeHeader(frame.message).substr(0, 200).c_str());
  ++sent_frames_;
  const bool role = !std::holds_alternative<protocol::Connect>(frame.message) &&
                    !std::holds_alternative<protocol::ConnectAck>(frame.message) &&
                    !std::holds_alternative<protocol::Ping>(frame.message) &&
                    !std::holds_alternative<protocol::Pong>(frame.message) &&
                    !std::holds_alternative<protocol::Disconnect>(frame.message);
  if (role) Check(session_->ready());
  // The peer's decoder accepts every frame we send.
  for (const PinRef& pin : frame.blocks) Check(pin && pin->bytes().size() == kBlockLen);
  Message decoded;
  Check(protocol::DecodeHeader(protocol::EncodeHeader(frame.message), frame.blocks.size() * kBlockLen,
                               protocol::DecodeContext{kBlockLen}, &decoded)
            .ok());
  Check(decoded == frame.message);
  Observe(frame);
  wire_.push_back(std::move(frame));
}

void Harness::Observe(const session::OutFrame& frame) {
  const Message& message = frame.message;
  if (const auto* m = std::get_if<protocol::Connect>(&message)) {
    Check(!own_connect_);  // one connect per session
    own_connect_ = *m;
  } else if (std::holds_alternative<protocol::ConnectAck>(message)) {
    ++sent_connect_acks_;
  } else if (const auto* m = std::get_if<protocol::Ping>(&message)) {
    last_ping_nonce_ = m->nonce;
  } else if (const auto* m = std::get_if<protocol::Pong>(&message)) {
    sent_pong_ = *m;
  } else if (const auto* m = std::get_if<protocol::Lookup>(&message)) {
    // A lookup travels in an open round, never in one a fetch closed.
    Check(!fetch_rounds_.contains(m->round_seq));
    Remember(session_lookups_, *m);
    Remember(client_rounds_, RoundKey{m->kv_request_id, m->round_seq});
  } else if (const auto* m = std::get_if<protocol::Fetch>(&message)) {
    if (m->keys.empty()) return;  // the terminal empty fetch
    Check(!fetch_owed_.empty());
    const JobId job = fetch_owed_.front();
    fetch_owed_.pop_front();
    LoadModel& load = loads_.at(job);
    Check(load.kv == m->kv_request_id && load.indexes == m->block_indexes);
    Check(fetch_rounds_.insert(m->round_seq).second);  // round tokens are never reused
    load.round = m->round_seq;
    load_by_round_[m->round_seq] = job;
    Remember(client_rounds_, RoundKey{m->kv_request_id, m->round_seq});
  } else if (const auto* m = std::get_if<protocol::AbortFetch>(&message)) {
    auto it = load_by_round_.find(m->round_seq);
    Check(it != load_by_round_.end());
    LoadModel& load = loads_.at(it->second);
    Check(load.kv == m->kv_request_id && !load.aborted);  // one abort per round
    load.aborted = true;
  } else if (const auto* m = std::get_if<protocol::LookupResp>(&message)) {
    sent_lookup_resp_ = *m;
  } else if (const auto* m = std::get_if<protocol::BlockData>(&message)) {
    ServedRound& round = served_[{m->kv_request_id, m->round_seq}];
    Check(round.demand);
    Check(frame.blocks.size() == m->block_indexes.size());
    for (size_t i = 0; i < frame.blocks.size(); ++i) {
      const auto* pin = dynamic_cast<const FuzzPin*>(frame.blocks[i].get());
      Check(pin != nullptr);
      auto owed = round.owed.find({m->block_indexes[i], pin->key()});
      Check(owed != round.owed.end());
      round.owed.erase(owed);
      if (pin->job()) Check(!stores_.at(*pin->job()).has_result);
    }
  } else if (const auto* m = std::get_if<protocol::TransferDone>(&message)) {
    ServedRound& round = served_[{m->kv_request_id, m->round_seq}];
    Check(round.demand);
    if (m->success) Check(round.owed.empty());
    round.demand = false;
    round.owed.clear();
  } else if (const auto* m = std::get_if<protocol::AbortAck>(&message)) {
    ++sent_abort_acks_;
    const RoundKey key{m->kv_request_id, m->round_seq};
    Check(acked_.insert(key).second);
    served_[key] = ServedRound{};
  }
}

// ---- local operations --------------------------------------------------------

std::string Harness::PickKv() {
  const uint8_t b = in_.Byte();
  if (b == 0xff) return std::string();                                    // invalid: empty
  if (b == 0xfe) return std::string(protocol::kMaxStringChars + 1, 'x');  // invalid: too long
  return std::string(kKvIds[b & 3]);
}

RoundKey Harness::PickClientRound() {
  const uint8_t b = in_.Byte();
  if (b < 0xe0 && !client_rounds_.empty()) return client_rounds_[client_rounds_.size() - 1 - b % client_rounds_.size()];
  return {std::string(kKvIds[b & 3]), static_cast<RoundSeq>((b >> 2) & 7)};
}

RoundKey Harness::PickServerRound() {
  const uint8_t b = in_.Byte();
  return {std::string(kKvIds[b & 3]), static_cast<RoundSeq>((b >> 2) & 7)};
}

std::vector<Key> Harness::PickKeys(size_t max) {
  std::vector<Key> keys(in_.Below(max + 1));
  for (Key& key : keys) key = PickKey();
  return keys;
}

void Harness::RequestBlocks() {
  const JobId job = next_job_++;
  const std::string kv = PickKv();
  const uint8_t mode = in_.Byte();
  std::vector<Key> keys;
  if ((mode & 1) != 0) {
    // Keys the engine saw as hits of the request's latest lookup.
    for (auto it = session_lookups_.rbegin(); it != session_lookups_.rend(); ++it) {
      if (it->kv_request_id != kv) continue;
      for (const Key& key : it->keys) {
        if (session_->RegisterLookup(kv, key) == session::ProbeAnswer::kHit) keys.push_back(key);
      }
      break;
    }
  }
  if (keys.empty()) keys = PickKeys(4);
  std::vector<SlotIndex> indexes(keys.size());
  const uint8_t base = in_.Byte();
  for (size_t i = 0; i < indexes.size(); ++i) {
    indexes[i] = (mode & 2) != 0 ? in_.Byte() & 15 : static_cast<SlotIndex>(base + i);  // may repeat
  }
  if ((mode & 0x40) != 0 && !indexes.empty()) indexes.back() = 0x80000000u;  // beyond the wire's range
  if ((mode & 0x80) != 0 && !indexes.empty()) indexes.pop_back();            // lengths differ
  auto sink = std::make_shared<Sink>(indexes);
  // Recorded first: a ready session sends the fetch from inside the call.
  loads_[job] = LoadModel{kv, indexes, sink, std::nullopt, {}, false, false};
  fetch_owed_.push_back(job);
  const Status status = session_->RequestBlocks(job, kv, std::move(keys), indexes, std::move(sink));
  if (!status.ok()) {
    // Refused: nothing was sent and no result is owed.
    Check(status.code() == Status::Code::kInvalid || status.code() == Status::Code::kUnavailable);
    Check(!fetch_owed_.empty() && fetch_owed_.back() == job);
    fetch_owed_.pop_back();
    loads_.erase(job);
    return;
  }
  Check(!closed());
  if (session_->ready()) Check(fetch_owed_.empty());  // sent at once, after any queued before the handshake
}

void Harness::AddSupply() {
  const JobId job = next_job_++;
  const std::string kv = PickKv();
  const uint8_t mode = in_.Byte();
  std::vector<Key> keys = PickKeys(4);
  std::vector<PinRef> pins;
  for (const Key& key : keys) pins.push_back(std::make_shared<FuzzPin>(region_, in_.Byte(), key, job));
  if ((mode & 1) != 0 && !pins.empty()) pins.back() = nullptr;  // not pinned: rejected
  if ((mode & 2) != 0) keys.push_back(KeyOf(mode >> 4));        // lengths differ: rejected
  stores_[job] = StoreModel{kv, false};
  session_->AddSupply(job, kv, std::move(keys), std::move(pins));
}

void Harness::ClockTick() {
  static constexpr std::chrono::milliseconds kJumps[] = {
      std::chrono::milliseconds(0),     std::chrono::milliseconds(1),    std::chrono::milliseconds(300),
      std::chrono::milliseconds(2000),  std::chrono::milliseconds(5000), std::chrono::milliseconds(10000),
      std::chrono::milliseconds(30000), std::chrono::milliseconds(61000)};
  now_ += kJumps[in_.Below(8)];
  const std::optional<Clock::time_point> deadline = session_->NextDeadline();
  const SessionState state_before = session_->state();
  sent_frames_ = 0;
  session_->OnTick();
  if (!deadline || now_ < *deadline) {
    // Nothing is due: the tick does nothing.
    Check(sent_frames_ == 0 && session_->state() == state_before);
  }
  // Whatever was due is done: the timer loop sleeps until a future time.
  if (const std::optional<Clock::time_point> next = session_->NextDeadline()) Check(*next > now_);
}

void Harness::Produce() {
  // The writer's contract: pull only when the previous data frame is written.
  for (const session::OutFrame& frame : wire_) {
    if (std::holds_alternative<protocol::BlockData>(frame.message)) return;
  }
  const bool has_data = session_->HasDataToSend();
  sent_frames_ = 0;
  const bool produced = session_->ProduceDataFrame();
  if (produced) Check(has_data && sent_frames_ > 0);
  if (!produced) Check(sent_frames_ == 0);
}

void Harness::Step(uint8_t op) {
  if (kTrace) std::fprintf(stderr, "op %d (state %d)\n", op % kOpCount, static_cast<int>(session_->state()));
  switch (op % kOpCount) {
    case kInLookup: {
      const RoundKey round = PickServerRound();
      Deliver(protocol::Lookup{round.first, PickKeys(4), round.second});
      break;
    }
    case kInLookupResp: {
      const RoundKey round = PickClientRound();
      const uint8_t hits = in_.Byte();
      protocol::LookupResp m{round.first, {}, {}, round.second};
      auto lookup = std::find_if(session_lookups_.rbegin(), session_lookups_.rend(), [&](const protocol::Lookup& l) {
        return l.kv_request_id == round.first && l.round_seq == round.second;
      });
      if (lookup != session_lookups_.rend() && (hits & 0x80) == 0) {
        m.keys = lookup->keys;
      } else {
        m.keys = PickKeys(4);
      }
      for (size_t i = 0; i < m.keys.size(); ++i) m.hits.push_back(((hits >> (i % 7)) & 1) == 0);
      Deliver(m);
      break;
    }
    case kInFetch: {
      const RoundKey round = PickServerRound();
      const uint8_t mode = in_.Byte();
      protocol::Fetch m{round.first, {}, {}, round.second};
      const size_t n = (mode & 7) % 5;  // 0 = the terminal empty fetch
      for (size_t i = 0; i < n; ++i) {
        m.keys.push_back(PickKey());
        m.block_indexes.push_back(in_.Byte() & 15);
      }
      Deliver(m);
      break;
    }
    case kInBlockData: {
      const RoundKey round = PickClientRound();
      protocol::BlockData m{round.first, round.second, {}};
      const size_t n = 1 + in_.Below(3);
      auto load = load_by_round_.find(round.second);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t b = in_.Byte();
        if (load != load_by_round_.end() && b < 0xf0 && !loads_.at(load->second).indexes.empty()) {
          const std::vector<SlotIndex>& indexes = loads_.at(load->second).indexes;
          m.block_indexes.push_back(indexes[b % indexes.size()]);
        } else {
          m.block_indexes.push_back(b & 15);
        }
      }
      if (ChecksumsOn()) m.xxh3 = PickChecksums(m.block_indexes.size());
      Deliver(m);
      break;
    }
    case kPayload:
      WritePayload();
      break;
    case kInTransferDone: {
      const RoundKey round = PickClientRound();
      Deliver(protocol::TransferDone{round.first, in_.Flag(), round.second});
      break;
    }
    case kInAbortFetch: {
      const RoundKey round = PickServerRound();
      Deliver(protocol::AbortFetch{round.first, round.second});
      break;
    }
    case kInAbortAck: {
      const RoundKey round = PickClientRound();
      Deliver(protocol::AbortAck{round.first, round.second});
      break;
    }
    case kInPing:
      Deliver(protocol::Ping{Token(in_.Byte())});
      break;
    case kInPong:
      Deliver(protocol::Pong{in_.Flag() && last_ping_nonce_ ? *last_ping_nonce_ : Token(in_.Byte())});
      break;
    case kInDisconnect:
      Deliver(protocol::Disconnect{in_.Flag() ? std::optional<std::string>(in_.Text(16)) : std::nullopt});
      break;
    case kInUnknown:
      Deliver(protocol::Unknown{"future_" + std::to_string(in_.Byte())});
      break;
    case kInConnect:
      Deliver(PeerConnect(in_.Byte()));
      break;
    case kInConnectAck:
      Deliver(PeerConnectAck(in_.Byte()));
      break;
    case kInRawHeader: {
      const uint64_t payload_len = (in_.Byte() & 3) * kBlockLen;
      const std::string header = in_.Text(160);
      Message decoded;
      if (protocol::DecodeHeader(header, payload_len, protocol::DecodeContext{kBlockLen}, &decoded).ok()) {
        DeliverDecoded(decoded);
      }
      break;
    }
    case kRegisterLookup: {
      const std::string kv = PickKv();
      const size_t n = 1 + in_.Below(3);
      for (size_t i = 0; i < n; ++i) {
        const session::ProbeAnswer answer = session_->RegisterLookup(kv, PickKey());
        if (closed()) Check(answer == session::ProbeAnswer::kMiss);
      }
      break;
    }
    case kFlush: {
      const size_t sent = session_->FlushPendingLookups();
      if (closed()) Check(sent == 0);
      break;
    }
    case kRequestBlocks:
      RequestBlocks();
      break;
    case kAddSupply:
      AddSupply();
      break;
    case kFinish:
      session_->Finish(PickKv());
      break;
    case kClockTick:
      ClockTick();
      break;
    case kProduce:
      Produce();
      break;
    case kWrite:
      for (size_t n = 1 + in_.Below(4); n > 0 && !wire_.empty(); --n) wire_.pop_front();
      break;
    case kPublish: {
      const Key key = PickKey();
      const uint8_t b = in_.Byte();
      if ((b & 0x80) != 0) {
        index_.published.erase(key);
      } else {
        index_.published[key] = b % kRegionBlocks;
      }
      break;
    }
    case kClose: {
      // The daemon's own reasons: plain text (peer bytes never reach them unquoted).
      std::string reason = in_.Text(8);
      for (char& c : reason) c = static_cast<char>('a' + static_cast<unsigned char>(c) % 26);
      const bool notify = in_.Flag();
      session_->Close(session::CloseCause::kOperator, reason, notify);
      Check(closed());
      break;
    }
    default:
      break;
  }
}

// ---- results -------------------------------------------------------------------

void Harness::Collect() {
  if (closed() && !closed_seen_) {
    // The daemon closes the socket: unwritten frames are dropped, and the
    // reader writes no more payload.
    closed_seen_ = true;
    wire_.clear();
    open_frame_.reset();
    fetch_owed_.clear();
  }
  session::SessionResults results = session_->TakeResults();
  if (kTrace) {
    for (const auto* list : {&results.loads, &results.stores}) {
      for (const session::JobResult& r : *list) {
        std::fprintf(stderr, "  %s result job %llu %s: %s\n", list == &results.loads ? "load" : "store",
                     static_cast<unsigned long long>(r.job_id), r.success ? "ok" : "failed", r.reason.c_str());
      }
    }
  }
  for (const session::JobResult& result : results.loads) {
    auto it = loads_.find(result.job_id);
    Check(it != loads_.end() && !it->second.has_result && it->second.kv == result.kv_request_id);
    LoadModel& load = it->second;
    load.has_result = true;
    if (result.success) {
      // Every destination arrived, each once, and the round was not aborted.
      Check(!load.aborted && load.round.has_value());
      Check(load.received == std::set<SlotIndex>(load.indexes.begin(), load.indexes.end()));
      Check(load.received.size() == load.indexes.size());
    } else {
      Check(!result.reason.empty());
    }
  }
  // A session closed in favour of another connection hands back, without
  // a result, the loads the peer never served (session/unserved_work.h):
  // the daemon owes their one result, so the model counts them as ended.
  for (const session::UnservedLoad& handed : results.unserved.loads) {
    auto it = loads_.find(handed.job_id);
    Check(it != loads_.end() && !it->second.has_result && it->second.kv == handed.kv_request_id);
    Check(session_->hands_back_work() && it->second.received.empty() && !it->second.aborted);
    Check(handed.block_indexes == it->second.indexes);
    it->second.has_result = true;
  }
  results.unserved = {};  // lets go of the sinks, as the daemon does once it asked again
  for (const session::JobResult& result : results.stores) {
    auto it = stores_.find(result.job_id);
    Check(it != stores_.end() && !it->second.has_result && it->second.kv == result.kv_request_id);
    it->second.has_result = true;
    if (!result.success) Check(!result.reason.empty());
    // The result frees the job's slots: no unwritten frame may read them.
    for (const session::OutFrame& frame : wire_) {
      for (const PinRef& block : frame.blocks) {
        const auto* pin = dynamic_cast<const FuzzPin*>(block.get());
        Check(pin != nullptr && pin->job() != result.job_id);
      }
    }
  }
  for (const std::string& kv : results.new_fetch_ids) Check(fetched_kvs_.contains(kv));
  if (max_rounds_ != 0) Check(session_->RoundsOpen() <= max_rounds_);
  if (closed_seen_) CheckClosed();
}

void Harness::CheckClosed() {
  for (const auto& [job, load] : loads_) {
    Check(load.has_result);
    Check(load.sink.use_count() == 1);  // the session let go of every destination
  }
  for (const auto& [job, store] : stores_) Check(store.has_result);
  Check(region_.live_pins == 0);
  Check(session_->LoadsInFlight() == 0 && session_->RoundsServing() == 0);
  Check(!session_->HasDataToSend() && !session_->NextDeadline());
}

void Harness::Finally() {
  if (!closed()) {
    // End of input: the daemon's reader saw EOF.
    session_->Close(session::CloseCause::kConnectionLost, "peer closed the connection", /*notify_peer=*/false);
  }
  Collect();
  // A closed session refuses new work; a late store still gets its result.
  Check(!session_->ProduceDataFrame());
  Check(session_->RegisterLookup("r0", KeyOf(0)) == session::ProbeAnswer::kMiss);
  Check(session_->FlushPendingLookups() == 0);
  Check(!session_->RequestBlocks(next_job_++, "r0", {KeyOf(0)}, {0}, std::make_shared<Sink>(std::vector<SlotIndex>{0}))
             .ok());
  const JobId late = next_job_++;
  stores_[late] = StoreModel{"r0", false};
  session_->AddSupply(late, "r0", {KeyOf(1)}, {std::make_shared<FuzzPin>(region_, 1, KeyOf(1), late)});
  Collect();
  Check(wire_.empty());
}

void Harness::Run() {
  Setup();
  for (size_t ops = 0; ops < kMaxOps && !in_.done(); ++ops) {
    Step(in_.Byte());
    Collect();
  }
  Finally();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input input(data, size);
  Harness harness(input);
  harness.Run();
  return 0;
}
