// ClientRole: the consumer half of one peer session.
//
// It probes the peer (lookup), asks for blocks (fetch), accepts only the
// block_data it asked for, and turns every load into exactly one JobResult.
// Like the seed's ClientRole it never touches a socket: frames leave through
// the injected SendFn (the session gates them until the handshake is done)
// and time comes from the injected Clock.
//
// Differences from the seed, fixed by wire-protocol.md section 6:
// * round tokens come from one session-wide counter and are never reused;
// * lookup_resp applies only to its request's open round;
// * block_data is accepted only for an in-flight load's not-yet-received
//   destination indexes; anything else is a violation (Status kViolation);
// * a load succeeds only on transfer_done{success:true} with every index
//   received exactly once;
// * finish, the load timeout and close end a load at once with a failure
//   result (abort_fetch is sent; the round is retired later by abort_ack or
//   the abort-ack timeout, and its late block_data is discarded meanwhile),
//   except that a load whose payload is being received right now gets its
//   result when that payload is complete, so slots are never written after
//   the result is reported.
//
// Thread-safety: none; driven from one event loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"
#include "session/session_types.h"
#include "session/unserved_work.h"

namespace kvpeer::session {

struct ClientConfig {
  Duration load_timeout = std::chrono::seconds(30);
  Duration abort_ack_timeout = std::chrono::seconds(10);
};

// The answer to one probe: known hit, known miss, or not known yet.
enum class ProbeAnswer { kHit, kMiss, kRetry };

// Where an inbound block_data payload goes.
struct BlockDataPlan {
  bool discard = false;                     // a late frame of an aborted round
  std::vector<std::span<uint8_t>> targets;  // one block_len span per index, in frame order
};

// What a torn-down session owes the engines.
struct ClientCloseResult {
  std::vector<JobResult> failed_loads;          // every load still without a result
  std::vector<std::string> failed_request_ids;  // loads in flight, unresolved probes, unloaded hits
};

class ClientRole {
 public:
  ClientRole(std::string peer_id, ClientConfig config, Clock clock, SendFn send);
  ~ClientRole();

  ClientRole(const ClientRole&) = delete;
  ClientRole& operator=(const ClientRole&) = delete;

  // Registers or resolves one probe of `key` for `kv_request_id`. The first
  // call queues the key for the next flush and returns kRetry; later calls
  // return kRetry until the answer arrives, then the cached answer.
  ProbeAnswer RegisterLookup(const std::string& kv_request_id, const protocol::Key& key);
  // RegisterLookup of each of `keys` in order, the answers appended to
  // `answers`; the request is found, its id checked and queued for the
  // flush once, not once a key (a request may carry 65,536 keys).
  void RegisterLookups(const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                       std::vector<ProbeAnswer>* answers);

  // Sends one lookup per request with unsent probes. Returns how many.
  size_t FlushPendingLookups();

  // How many distinct probes the open round of `kv_request_id` would hold
  // after RegisterLookup of every key in `keys` (keys probed already count
  // once). Changes nothing; lets the caller bound a request's probes before
  // registering them.
  size_t ProbesWith(const std::string& kv_request_id, const std::vector<protocol::Key>& keys) const;

  // Sends the fetch for a load into `sink`'s slots `block_indexes`.
  // Errors (kInvalid, nothing sent, no result owed): mismatched lengths, an
  // empty load, a destination index used twice, a job id already in flight,
  // or a key that is not a confirmed hit of the open round of a request that
  // probed this peer. The load fails as timed out after `timeout`, by
  // default the configured load_timeout: a load asked again after a
  // superseded connection handed it back gets what is left of its first
  // timeout (daemon/peer/peer_manager.cc, ResubmitLoad).
  Status RequestBlocks(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                       std::vector<protocol::SlotIndex> block_indexes, SlotSinkRef sink,
                       std::optional<Duration> timeout = std::nullopt);

  // The engine is done with `kv_request_id`: in-flight loads are aborted and
  // fail, an open lookup round is closed with the terminal empty fetch.
  void Finish(const std::string& kv_request_id);

  // Inbound frames. A non-ok Status is a protocol violation by the peer.
  void OnLookupResp(const protocol::LookupResp& message);
  Status OnTransferDone(const protocol::TransferDone& message);
  Status OnAbortAck(const protocol::AbortAck& message);
  Status OnBlockDataHeader(const protocol::BlockData& message, BlockDataPlan* plan);
  // The payload announced by the last accepted OnBlockDataHeader has landed.
  // With checksums on, each landed block is checked against the header's
  // xxh3 before it counts: a mismatch fails the load, not the connection.
  void OnBlockDataComplete(const protocol::BlockData& message);

  // The "xxh3" feature is on for this connection (wire-protocol.md section
  // 7): every block_data must carry a valid xxh3 array, and every landed
  // block is checked. Called once the handshake has negotiated it.
  void EnableChecksums();
  // Blocks that failed their check since the last call, each once.
  std::vector<ChecksumFailure> TakeChecksumFailures();

  // The load of the open frame (header accepted, payload not landed) has
  // ended (timeout or finish): its result waits for the payload to land,
  // because until then the peer's bytes may be going into its slots.
  bool OpenFrameAbandoned() const;
  // The I/O layer has stopped the open frame's payload from reaching the
  // slots (the rest of it is read and dropped): the waiting result is
  // reported now instead of when the payload would have landed.
  // REQUIRES: OpenFrameAbandoned().
  void AbandonOpenFrame();
  // The open frame's payload could not be written into its slots (their
  // memory is gone): its load fails with `reason` (if it had not ended
  // already; counted as kSlotsUnmapped) and the frame is abandoned; the I/O
  // layer drops the rest.
  void FailOpenFrame(const std::string& reason);

  // Fires load and abort-ack timeouts.
  void OnTick();
  // The earliest time OnTick has something to do, if any.
  std::optional<TimePoint> NextDeadline() const;

  // Results produced since the last call, each exactly once.
  std::vector<JobResult> TakeResults();

  // Ends everything: every load without a result fails with `reason`,
  // counted as `cause` (kSessionClosed, or kShutdown when the node stops).
  ClientCloseResult Close(const std::string& reason, JobFailure cause = JobFailure::kSessionClosed);

  // Takes back what the peer never served, so it can be asked again over
  // another connection to the same peer (session/unserved_work.h): loads
  // of requests that never probed this peer (disaggregated prefill) whose
  // fetch nothing answered yet, and the unanswered probes of requests that
  // hold no hit and no load here. They leave the role without a result;
  // everything else stays for Close. Called just before Close.
  UnservedWork TakeUnservedWork();
  // A load whose round is not retired yet: in flight, or aborted and
  // awaiting abort_ack (its late frames are still expected).
  bool HasActiveLoads() const;
  // Loads still owed a result.
  size_t LoadsInFlight() const;
  // Requests with any state held here; 0 once every request has finished
  // and its rounds are retired (for tests: nothing leaks).
  size_t TrackedRequests() const;
  // Holds nothing at all: no request (probe, open round, unfinished
  // symmetric request), no load in flight or awaiting abort_ack, no result
  // owed. What SessionConfig::idle_timeout waits for.
  bool Idle() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpeer::session
