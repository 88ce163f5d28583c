// The seam between the control side of the daemon (engine sessions, the
// control server) and the peer side (TCP connections, PeerSessions).
//
// PeerService is what engines' requests need from peers; ResultSink is how
// the peer side hands results back. The peer side never calls a ResultSink
// from inside a PeerService call: its results wait in an outbox drained on
// a later turn of the event loop (daemon/peer/result_outbox.h).
//
// A load's ids, from engine to wire (the one place the mapping is written):
// 1. the engine's job_id, unique per engine only (EngineSession's jobs);
// 2. the node job id (session::JobId), which EngineRegistry::AddRoute
//    allocates and maps back to (engine, job_id) when the result comes. It
//    is the only id that crosses this seam: the peer side, its directory's
//    resubmission budgets and the session's client role all use it, and a
//    load asked again over another connection keeps it;
// 3. on the wire a fetch names its round (round_seq, per session), which
//    the client role maps to the node job id; a resubmitted load gets a
//    new round on the new connection.
//
// Thread-safety: both live on the daemon's one event loop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "daemon/api/api_error.h"
#include "daemon/node/peer_snapshot.h"
#include "protocol/messages.h"
#include "session/client_role.h"
#include "session/session_types.h"

namespace kvpeer::daemon {

namespace metrics {
class Registry;
}

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // A load or store job ended (exactly once per job).
  virtual void OnLoadResult(const session::JobResult& result) = 0;
  virtual void OnStoreResult(const session::JobResult& result) = 0;
  // Work of `kv_request_id` towards `peer` failed as a whole (peer death,
  // unreachable peer, unresolved probes): poll reports it in failed_requests.
  virtual void OnRequestFailed(const std::string& peer, const std::string& kv_request_id) = 0;
  // Probe answers from `peer` may have changed: a lookup_resp arrived, or
  // (`ended`) the peer's session ended. Wakes lookups waiting with wait_ms
  // (control-api.md, the `lookup` row).
  virtual void OnProbesChanged(const std::string& peer, bool ended) { (void)peer, (void)ended; }
};

class PeerService {
 public:
  virtual ~PeerService() = default;

  // Symmetric probe of `keys` on `peer` (dials if needed). Answers per key;
  // with `flush` the probe is sent at once. peer_unavailable while the peer
  // is backing off after a failed dial; probes then answer miss.
  virtual Status Lookup(const std::string& peer, const std::string& kv_request_id,
                        const std::vector<protocol::Key>& keys, bool flush,
                        std::vector<session::ProbeAnswer>* answers) = 0;
  // Sends every registered, unsent probe. Returns lookup messages sent.
  virtual size_t FlushLookups() = 0;
  // Fetches `keys` from `peer` into `sink`'s slots; the result arrives
  // through ResultSink::OnLoadResult(job_id). An error means no result is
  // owed.
  virtual Status Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
                      std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> slots,
                      session::SlotSinkRef sink) = 0;
  // Offers supply for a remote decoder's fetch of `kv_request_id`; the
  // result arrives through ResultSink::OnStoreResult(job_id).
  virtual void Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
                     std::vector<session::PinRef> blocks) = 0;
  // An engine is done with `kv_request_id`. Its consumer half ends on
  // `client_peers` (the peers that engine probed or loaded it from); when the
  // engine is the request's `producer` (it stored supply for it), the
  // producer half ends on every peer. Other engines' use of the same id is
  // left alone.
  virtual void Finish(const std::string& kv_request_id, const std::vector<std::string>& client_peers,
                      bool producer) = 0;

  // Operator operations. Connect calls `done` once the peer is ready or
  // failed (peer_unavailable), at most the handshake timeout later.
  virtual void Connect(const std::string& peer, std::function<void(Status)> done) = 0;
  virtual Status Disconnect(const std::string& peer) = 0;
  // One snapshot per peer entry (`status.peers` and the per-peer metrics
  // are rendered from them).
  virtual std::vector<PeerSnapshot> PeerSnapshots() const = 0;
  // Peer connections not ready yet (control-api.md `status.handshaking`).
  virtual size_t Handshaking() const { return 0; }
  // Adds the peer side's node-wide metric families (beyond the snapshots)
  // to a scrape's registry; see docs/operations.md for the names.
  virtual void CollectMetrics(metrics::Registry& registry) const { (void)registry; }
};

}  // namespace kvpeer::daemon
