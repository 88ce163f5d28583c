// Types shared by the session layer: the injected clock and send callback,
// the interfaces through which roles reach block memory, and job results.
//
// The session layer is pure logic: no sockets, no Asio, no threads. The
// daemon (or a test) implements these interfaces over shared memory (or
// in-memory regions) and drives the roles with plain method calls.
//
// Thread-safety: none. Everything here is used from one event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "protocol/block_checksum.h"
#include "protocol/messages.h"

namespace kvpeer::session {

using TimePoint = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;
// The injected clock: tests move it by hand, the daemon passes steady_clock::now.
using Clock = std::function<TimePoint()>;

using JobId = uint64_t;

// A source block pinned for reading. Its bytes stay valid and unchanged while
// any reference to it lives; dropping the last reference unpins it. Frames
// that still have to be written hold references, which is how "a pin is
// released only when no queued frame still reads that slot" holds by
// construction.
class PinnedBlock {
 public:
  virtual ~PinnedBlock() = default;
  virtual std::span<const uint8_t> bytes() const = 0;
  // False once the memory behind bytes() is gone (an engine truncated its
  // region file): reading it would fault, so it must not be sent.
  virtual bool Readable() const { return true; }
  // The block's XXH3-64 as block_data.xxh3 sends it (wire-protocol.md
  // section 7): the value kept when its engine published it sealed, else one
  // computed now; nullopt when the memory is gone (see Readable).
  virtual std::optional<uint64_t> Checksum() const { return protocol::BlockChecksum(std::as_bytes(bytes())); }
  // After the block's bytes were written to a peer: false when the block was
  // sealed (control-api.md `publish` `seal`) and its slot no longer holds
  // the sealed bytes, so what was sent may not be what was published. The
  // writer then fails the round (docs/vllm.md, "Serving without pins"):
  // a consumer without the xxh3 feature could not tell by itself.
  virtual bool SealHoldsAfterWrite() const { return true; }
};
using PinRef = std::shared_ptr<const PinnedBlock>;

// The node-wide index of published keys, implemented by the daemon over all
// local engines' regions. Answers peers' lookups with no engine involvement.
class PublishedBlocks {
 public:
  virtual ~PublishedBlocks() = default;
  // Pins the block published under `key`, or returns null when no local
  // engine publishes it.
  virtual PinRef PinIfPublished(const protocol::Key& key) = 0;
};

// The destination of a load: the consumer engine's slots. The span of a slot
// is block_len bytes and stays valid while the SlotSink lives.
class SlotSink {
 public:
  virtual ~SlotSink() = default;
  virtual std::span<uint8_t> Slot(protocol::SlotIndex index) = 0;
  // False once the memory behind the slots is gone (see PinnedBlock).
  virtual bool Writable() const { return true; }
  // The XXH3-64 of a slot whose block has landed, or nullopt when its memory
  // is gone (see Writable).
  virtual std::optional<uint64_t> LandedChecksum(protocol::SlotIndex index) {
    return protocol::BlockChecksum(std::as_bytes(Slot(index)));
  }
};
using SlotSinkRef = std::shared_ptr<SlotSink>;

// One frame to put on the connection. For block_data, `blocks` are the source
// blocks whose bytes, concatenated in order, form the payload (written with
// scatter/gather straight from their memory). The references keep the blocks
// pinned until the frame has been written and dropped.
struct OutFrame {
  protocol::Message message;
  std::vector<PinRef> blocks;
};

// Frames are written in the order they are sent.
using SendFn = std::function<void(OutFrame)>;

// The result of a load (client role) or a store (server role supply) job.
// Every job gets exactly one.
// A block whose landed bytes did not match the checksum its producer sent
// (wire-protocol.md section 7): its load failed; the daemon logs and counts it.
struct ChecksumFailure {
  std::string kv_request_id;
  protocol::Key key;
  protocol::SlotIndex block_index = 0;
  uint64_t expected = 0;  // what block_data.xxh3 said
  uint64_t landed = 0;    // what the slot holds
};

// Why a load or a store job failed, as a value: metric labels, counters and
// branches come from it, never from JobResult::reason, which is for people
// (rewording a message must not move a metric, and a peer's words must not
// choose one).
enum class JobFailure : uint8_t {
  kNone,  // succeeded
  // Loads (client role).
  kTimeout,          // the load timeout passed (wire-protocol.md 7.4); a store: nobody fetched in time
  kRequestFinished,  // its engine finished the request while it was in flight (7.5)
  kPeerFailed,       // the producer answered transfer_done{success:false}
  kIncomplete,       // transfer_done before every block arrived (7.3)
  kChecksum,         // a block did not match its xxh3 (7.10)
  kSlotsUnmapped,    // the destination region shrank under the load
  // Store jobs (server role supply).
  kUnfetched,  // the consumer finished the request without fetching the blocks
  kAborted,    // the consumer aborted the fetch
  kNotServed,  // the round serving them ended otherwise (a torn source, a timeout)
  kRefused,    // the store itself was not acceptable (AddSupply's checks)
  // Either.
  kShutdown,       // this node is shutting down
  kSessionClosed,  // the peer session ended; the reason says why
};

// How a job failed: the cause (for counting) and the reason (for people).
struct FailureReport {
  JobFailure cause;
  std::string reason;
};

struct JobResult {
  JobId job_id = 0;
  std::string kv_request_id;
  bool success = false;
  std::string reason;                      // empty on success; says why on failure
  JobFailure failure = JobFailure::kNone;  // a failed load's cause
};

// What the server role did to bound a peer's rounds (wire-protocol.md
// section 6, "Every round a peer opens on this node's server role ends" and
// "bounded in bytes"), counted since the last time they were taken. The
// daemon adds them to the node's counters (docs/operations.md).
struct RoundEvents {
  uint64_t lookup_rounds_expired = 0;   // lookup-only rounds retired by the round timeout
  uint64_t fetches_unsupplied = 0;      // PD fetches failed by the unsupplied timeout
  uint64_t lookups_over_key_bytes = 0;  // lookups answered all-miss: key-byte bound
  uint64_t fetches_over_key_bytes = 0;  // fetches failed: key-byte bound

  bool empty() const {
    return lookup_rounds_expired == 0 && fetches_unsupplied == 0 && lookups_over_key_bytes == 0 &&
           fetches_over_key_bytes == 0;
  }
  RoundEvents& operator+=(const RoundEvents& other) {
    lookup_rounds_expired += other.lookup_rounds_expired;
    fetches_unsupplied += other.fetches_unsupplied;
    lookups_over_key_bytes += other.lookups_over_key_bytes;
    fetches_over_key_bytes += other.fetches_over_key_bytes;
    return *this;
  }
};

}  // namespace kvpeer::session
