// ServerRole: the producer half of one peer session.
//
// It answers the peer's lookups at once from the node-wide PublishedBlocks
// (pinning hits and parking them under the lookup's round), matches fetch
// demand against supply (lookup pins, or `store` jobs for disaggregated
// prefill, in either order), streams matched blocks as block_data frames and
// ends every round with exactly one terminal: transfer_done, or abort_ack
// when the consumer aborted it (none for the terminal empty fetch).
//
// Data frames are pulled, not pushed: the connection's writer calls
// ProduceDataFrame() whenever it has no data frame in flight, and the role
// then sends one block_data frame (or the transfer_done that follows a
// round's last frame) through the SendFn. That keeps memory bounded, lets
// control frames overtake at most one data frame, and makes abort simple:
// nothing of an aborted round is queued anywhere but here.
//
// Pins are PinRefs: a round holds its blocks' references, each frame holds
// its own, so a slot is unpinned only when no round and no unwritten frame
// still reads it.
//
// Differences from the seed and hazards avoided (docs/edge-cases.md):
// lookups answered immediately (no serve window); PD supply binds to the
// round that demands its keys, never to a fixed round 0 (E59); a round is
// finalized exactly once (E57); results queued before Close are returned by
// Close (E58); a terminal empty fetch never drops a round that is still
// sending (E60); tokens are session-wide so no round is reused (E56).
//
// Thread-safety: none; driven from one event loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"
#include "session/session_types.h"

namespace kvpeer::session {

struct ServerConfig {
  uint64_t block_len = 0;
  // Upper bound of one block_data payload; at least one block is always sent.
  // 1 MiB rather than the protocol's 64 MiB: a control frame (lookup_resp,
  // abort_ack) waits behind at most one data frame, and smaller frames
  // pipeline better between the two daemons (docs/performance.md).
  uint64_t max_frame_payload = 1ull * 1024 * 1024;
  // A bound store job whose blocks are not all demanded by then fails, so
  // an engine's pins never leak on a consumer that went quiet.
  Duration store_timeout = std::chrono::seconds(60);
  // Open rounds (lookup-only or with demand) this role holds for its peer at
  // most; 0 = no limit. Beyond it a lookup that would open a new round is
  // answered all-miss and a fetch that would open one gets
  // transfer_done{success:false}: refused work, never a protocol violation.
  // Rounds already open are served as usual.
  size_t max_rounds = 0;
  // A lookup-only round (its hits pinned, no fetch yet) is retired this long
  // after its first lookup: its pins are released, as if its fetch had been
  // the terminal empty one (wire-protocol.md section 6, --round-timeout-s).
  Duration round_timeout = std::chrono::seconds(30);
  // A disaggregated-prefill fetch whose demand is still not all supplied
  // this long after it arrived is answered transfer_done{success:false}
  // (the unbound-store timeout, 60 s, the same as store_timeout).
  Duration unsupplied_timeout = std::chrono::seconds(60);
  // Key bytes all open rounds of this peer may hold together; 0 = no limit.
  // A key counts its raw bytes plus kRoundKeyOverhead (the map node and
  // string header that hold it). A lookup beyond it is answered all-miss,
  // a fetch that would open a round beyond it transfer_done{success:false}
  // (--max-round-key-bytes).
  uint64_t max_round_key_bytes = 64ull * 1024 * 1024;
};

// The fixed per-key charge of ServerConfig::max_round_key_bytes.
inline constexpr uint64_t kRoundKeyOverhead = 128;

class ServerRole {
 public:
  ServerRole(std::string peer_id, ServerConfig config, Clock clock, SendFn send, PublishedBlocks& index);
  ~ServerRole();

  ServerRole(const ServerRole&) = delete;
  ServerRole& operator=(const ServerRole&) = delete;

  // Inbound frames. A non-ok Status is a protocol violation by the peer.
  void OnLookup(const protocol::Lookup& message);
  Status OnFetch(const protocol::Fetch& message);
  void OnAbortFetch(const protocol::AbortFetch& message);

  // A local store job's blocks, offered for `kv_request_id`. The job ends
  // with exactly one result (TakeStoreResults).
  void AddSupply(JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                 std::vector<PinRef> blocks);

  // Producer-side finish: demand that can no longer be met fails at once;
  // rounds still sending finish when their last frame has been produced.
  void Finish(const std::string& kv_request_id);

  // Sends the next data frame (block_data, or a round's final
  // transfer_done) if there is one. Returns whether it sent anything.
  // REQUIRES: every frame produced earlier has been written, so that
  // transfer_done follows its round's data on the wire.
  bool ProduceDataFrame();

  // The "xxh3" feature is on for this connection (wire-protocol.md section
  // 7): every data frame carries its blocks' checksums (PinnedBlock::Checksum).
  void EnableChecksums();
  // Also true while store results wait for the last produced data frame to
  // be written (a result frees the engine's slots): the next pull, after
  // that write, releases them and may send nothing.
  bool HasDataToSend() const;
  // The data frame produced last could not be read whole while it was being
  // written (an engine shrank its region: wire spec section 6, "A torn
  // source"); the writer sent zeros for the rest of it. The round fails
  // (transfer_done{success:false} if it is still open; a transfer_done
  // already sent behind the frame is the writer's to correct) and so does
  // every store job with a block in that frame, even one whose success
  // result is held for the frame. REQUIRES: before the next ProduceDataFrame.
  void OnDataFrameTorn(const std::string& kv_request_id, protocol::RoundSeq round_seq, const std::string& reason);

  // Fires store, round and unsupplied-fetch timeouts.
  void OnTick();
  std::optional<TimePoint> NextDeadline() const;

  // Store job results since the last call, each exactly once.
  std::vector<JobResult> TakeStoreResults();
  // Request ids that received a fetch since the last call; the daemon binds
  // their unbound store supply to this session.
  std::vector<std::string> TakeNewFetchIds();
  // Request ids that received a fetch or supply (so the daemon may have
  // bound their supply here) and of which this role now holds nothing: no
  // round, no store job (their rounds ended, were aborted or timed out, and
  // their supply was sent or failed). The daemon drops such a binding unless
  // Serves() says the request came back since; a later fetch binds it anew.
  // Every id is reported once per time it became served.
  std::vector<std::string> TakeEndedFetchIds();
  // The role holds state for this request (a round or a store job) since a
  // fetch or supply for it, which a later TakeEndedFetchIds will report
  // ended. A request only looked up since is not served in this sense.
  bool Serves(const std::string& kv_request_id) const;

  // Ends everything: every store job without a result fails with `reason`
  // (results already queued are included), every pin is dropped.
  // Store jobs still open fail as `failure` (kSessionClosed, or kShutdown
  // when the node stops).
  std::vector<JobResult> Close(const std::string& reason, JobFailure failure = JobFailure::kSessionClosed);

  size_t RoundsServing() const;
  // Every open round, with or without demand (what max_rounds bounds).
  size_t RoundsOpen() const;
  // Lookups and fetches refused because max_rounds rounds were open.
  uint64_t RoundsRefused() const;
  // Key bytes the open rounds hold (what max_round_key_bytes bounds).
  uint64_t RoundKeyBytes() const;
  // Timeouts and key-byte refusals since the last call.
  RoundEvents TakeRoundEvents();
  // Request ids with any state left (rounds or unbound supply); 0 once
  // everything has ended. For tests and status.
  size_t TrackedRequests() const;
  // Holds nothing at all: no open round, no store job (bound or not), no
  // data frame to produce and no result held for one. What
  // SessionConfig::idle_timeout waits for.
  bool Idle() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpeer::session
