// The harness of the fuzz_peer_session target (fuzz/fuzz_peer_session.cc
// says what it drives and which properties it checks): the local node's
// fakes, what the harness knows of every job and round, and the Harness
// that plays the remote peer and the local daemon at once. Its parts are in
// peer_session_harness.cc (setup, outbound frames, results),
// peer_session_inbound.cc (inbound frames) and peer_session_local_ops.cc
// (local operations, clock and writer).
#pragma once

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

namespace peer_session_fuzz {

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

inline void Check(bool property) {
  if (!property) __builtin_trap();
}

// KVPEER_FUZZ_TRACE=1 prints every operation, frame and result (for
// reading a reproducer; the fuzzer itself runs silent).
inline const bool kTrace = std::getenv("KVPEER_FUZZ_TRACE") != nullptr;

inline std::string Token(uint64_t n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", 0x5eedull, static_cast<unsigned long long>(n));
  return buf;
}

// Ten raw keys; the last is long, so messages that quote keys cut them.
inline Key KeyOf(size_t i) {
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

}  // namespace peer_session_fuzz
