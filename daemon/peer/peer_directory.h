// PeerDirectory: every decision of the peer side about peers, as plain
// state with an injected clock and no I/O. It knows which connection
// carries a peer's work, which of two crossed or duplicate connections
// survives (session/connection_arbiter.h), when a peer backs off and when
// its entry is reaped, where a request's store supply goes, and what work a
// superseded session handed back and may be asked again.
//
// PeerManager owns the sockets, timers, the acceptor and the resolver: it
// tells the directory what happened (a dial started, a connection became
// ready or closed, a session handed work back), with the facts only a live
// connection knows, and does what the directory answers. Connections are
// named by ConnectionId, issued here, so every rule can be driven by plain
// calls (tests/daemon/peer/peer_directory_test.cc).
//
// Thread-safety: none; used from the daemon's one event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "daemon/node/peer_snapshot.h"
#include "daemon/node/peer_state.h"
#include "session/close_cause.h"
#include "session/connection_arbiter.h"
#include "session/peer_disconnect_reason.h"
#include "session/session_types.h"
#include "session/unserved_work.h"

namespace kvpeer::daemon {

// Names one connection the directory placed in a peer entry; 0 = none.
using ConnectionId = uint64_t;

// A first failed dial waits this long; each further one twice as long, up
// to the cap, until a connection to the peer becomes ready.
inline constexpr auto kInitialBackoff = std::chrono::milliseconds(100);
inline constexpr auto kMaxBackoff = std::chrono::seconds(5);
// How often one load handed back by superseded sessions is asked again: a
// crossed first dial needs one or two (docs/wire-protocol.md, section 9,
// "(f) Work on a superseded connection"); more means the peer keeps
// superseding its own connections, and the load fails.
inline constexpr unsigned kMaxResubmits = 4;

struct PeerDirectoryConfig {
  std::string local_id;  // this node's id (the crossed-dial rule)
  size_t max_peers = 0;  // peers with a live connection at most; 0 = none
  session::Duration reap_after = std::chrono::seconds(60);
  session::Duration load_timeout = std::chrono::seconds(30);
};

using ConnectWaiter = std::function<void(Status)>;

struct PeerEntry {
  PeerState state = PeerState::kClosed;
  std::chrono::system_clock::time_point since;  // when `state` was entered (status)
  ConnectionId connection = 0;
  session::Duration backoff{0};
  session::TimePoint backoff_until{};
  std::optional<std::string> last_error;
  std::vector<ConnectWaiter> connect_waiters;
  // Bytes and stats of connections already gone (the live one's are added
  // by PeerMetrics::Snapshot), and the entry's dials and loads.
  PeerCounters counters;
  // When the last connection ended; the entry is reaped reap_after later
  // unless a connection or a waiter comes first.
  session::TimePoint idle_since{};
};

// Which connection carries work to a peer (Acquire).
struct PeerRoute {
  enum class Kind {
    kUse,          // `connection` is live
    kDial,         // dial now; `connection` names the new dial
    kBackoff,      // the last dial failed: unavailable until it ends (`why`)
    kAtPeerLimit,  // max_peers live peers already: unavailable (`why`)
  };
  Kind kind = Kind::kUse;
  ConnectionId connection = 0;
  std::string why;
};

// What becomes of an accepted connection that just became ready (Adopt).
struct Adoption {
  enum class Kind {
    kAdopt,         // it is the peer's connection now
    kTooManyPeers,  // refuse it: disconnect "too many peers"
    kCloseNew,      // it is a duplicate: close it ("duplicate")
    kSupersede,     // it replaces `old`, which closes with `cause`/`reason`
  };
  Kind kind = Kind::kAdopt;
  ConnectionId connection = 0;  // the adopted connection's id
  ConnectionId old = 0;
  session::CloseCause cause = session::CloseCause::kDuplicate;
  session::PeerDisconnectReason reason = session::PeerDisconnectReason::kDuplicate;
};

// Work a superseded session handed back, waiting to be asked again.
struct Resubmission {
  std::string peer;
  session::UnservedWork work;
  std::string reason;  // why the session that held it closed
};

// The answer for one handed-back load (AllowResubmit).
struct ResubmitVerdict {
  bool allowed = false;
  unsigned times_asked = 0;  // before this one
  // When allowed: the load timeout of the load asked again, what is left of
  // one load timeout since the engine submitted it (never a fresh one).
  session::Duration time_left{};
};

// How long a load handed back by a superseded connection may still take
// if it is asked again: what is left of one load timeout counted from the
// load's start (not from its first hand-back, issue 25 finding 6, which let
// a peer that held each fetch and then closed keep the engine waiting about
// three load timeouts), or nullopt when it must fail now (asked `max_asks`
// times already, or no time left).
std::optional<session::Duration> ResubmitTimeout(unsigned asked, unsigned max_asks, session::TimePoint started,
                                                 session::TimePoint now, session::Duration load_timeout);

class PeerDirectory {
 public:
  using WallClock = std::function<std::chrono::system_clock::time_point()>;
  PeerDirectory(
      PeerDirectoryConfig config, session::Clock clock,
      WallClock wall_clock = [] { return std::chrono::system_clock::now(); });

  void set_local_id(std::string local_id) { config_.local_id = std::move(local_id); }
  // From now on closes are not failed dials and handed-back loads fail
  // as shut down.
  void BeginShutdown() { shutting_down_ = true; }
  bool shutting_down() const { return shutting_down_; }

  // --- Connections ---
  // Which connection carries work to `peer`; kDial has made the entry
  // connecting and counted the dial. REQUIRES: `peer` is HOST:PORT.
  PeerRoute Acquire(const std::string& peer);
  // An accepted connection became ready. `existing` describes the peer's
  // current connection (asked with Connection(peer)), when it has one.
  Adoption Adopt(const std::string& peer, const std::optional<session::ConnectionFacts>& existing,
                 const session::ConnectionFacts& incoming);
  // The connection reached ready: the entry becomes ready, its backoff
  // ends. Returns the connect waiters to answer Ok, or nullopt when
  // nothing changed (not the peer's connection, or ready already).
  std::optional<std::vector<ConnectWaiter>> OnReady(const std::string& peer, ConnectionId connection);
  // The dialled connection's peer has answered: connecting -> handshaking.
  void OnHandshaking(const std::string& peer, ConnectionId connection);
  // The connection closed with `error`. A connection that never became
  // ready puts the peer into backoff. Returns the waiters to fail, or
  // nullopt when it was not the peer's connection (superseded, unknown).
  std::optional<std::vector<ConnectWaiter>> OnClosed(const std::string& peer, ConnectionId connection,
                                                     const std::string& error);
  // Answered once the connection is ready or failed. REQUIRES: Acquire
  // returned kUse or kDial for `peer`.
  void AddWaiter(const std::string& peer, ConnectWaiter waiter);
  // The peer's current connection; 0 = none.
  ConnectionId Connection(const std::string& peer) const;
  size_t LivePeerCount() const;

  // --- Entries ---
  const std::map<std::string, PeerEntry>& entries() const { return entries_; }
  // Null when the peer has no entry.
  PeerCounters* Counters(const std::string& peer);
  // Removes the entries idle for reap_after; returns their peers, with how
  // long each was idle.
  std::vector<std::pair<std::string, session::Duration>> Reap();
  // How long the reaper waits between looks.
  session::Duration ReapTick() const;

  // --- Store supply ---
  // `peer`'s session fetched `kv_request_id`: its supply goes there.
  void Bind(const std::string& kv_request_id, const std::string& peer);
  std::optional<std::string> BoundPeer(const std::string& kv_request_id) const;
  // `peer`'s session no longer serves `kv_request_id`; the binding goes
  // unless the peer's current connection (`current_serves`) serves it.
  void UnbindEnded(const std::string& kv_request_id, const std::string& peer, bool current_serves);
  // The producer finished the request: no more supply goes anywhere.
  void Unbind(const std::string& kv_request_id) { bindings_.erase(kv_request_id); }
  size_t binding_count() const { return bindings_.size(); }

  // --- Hand-back and resubmission ---
  // The engine submitted `job` now: its resubmission budget counts from here.
  void OnLoadStarted(session::JobId job);
  // `job` has its result: its budget goes.
  void OnLoadEnded(session::JobId job) { loads_.erase(job); }
  // A session of `peer` closed with `cause` and handed `work` back. Returns
  // true when the queue was empty before (the caller schedules one
  // TakeResubmissions after the current event).
  bool HandBack(const std::string& peer, session::UnservedWork work, session::CloseCause cause,
                const std::string& reason);
  std::vector<Resubmission> TakeResubmissions() { return std::exchange(queue_, {}); }
  bool resubmissions_waiting() const { return !queue_.empty(); }
  // Whether a handed-back load may be asked again now; counts it if so.
  ResubmitVerdict AllowResubmit(session::JobId job);
  // The engine finished `kv_request_id` on `peer` while work of it waited:
  // its probes are dropped; returns its loads' ids (they fail now).
  std::vector<session::JobId> FinishRequest(const std::string& peer, const std::string& kv_request_id);
  size_t loads_tracked() const { return loads_.size(); }

 private:
  struct LoadBudget {
    unsigned resubmits = 0;
    session::TimePoint started{};  // when the engine submitted the load
  };
  void SetState(PeerEntry& entry, PeerState state);
  bool AtPeerLimit() const { return config_.max_peers != 0 && LivePeerCount() >= config_.max_peers; }
  void DropBindings(const std::string& peer);

  PeerDirectoryConfig config_;
  session::Clock clock_;
  WallClock wall_clock_;
  bool shutting_down_ = false;
  ConnectionId next_connection_ = 1;
  std::map<std::string, PeerEntry> entries_;
  // kv_request_id -> peer whose session fetched it (where its supply goes),
  // while that session serves the request (UnbindEnded).
  std::map<std::string, std::string> bindings_;
  std::vector<Resubmission> queue_;
  std::unordered_map<session::JobId, LoadBudget> loads_;
};

}  // namespace kvpeer::daemon
