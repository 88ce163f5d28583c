// PeerResolver: turns the host of a peer name into addresses without one
// slow name stalling any other peer (docs/security.md, "Name resolution").
//
// Asio's own async_resolve runs every lookup of the process on one hidden
// thread, one after another, with no timeout and no way to take a lookup
// back: a name whose DNS server answers late delays every dial behind it.
// Here instead:
//   * an IP literal is answered on the next turn of the event loop, never
//     by DNS;
//   * other names are looked up (getaddrinfo) on a small pool of threads,
//     several at once; a name already being looked up is not asked again,
//     its new callers join the lookup under way;
//   * every caller has its own timeout and gets a failure naming the host
//     when it expires, even while the thread's getaddrinfo goes on (it
//     cannot be interrupted; its late answer still fills the cache);
//   * a caller that gives up destroys its Lookup handle: its callback is
//     dropped at once, never called, and nothing it captured is kept;
//   * answers are cached briefly (ttl), failures more briefly (negative_ttl).
// Every table is bounded: cached names, names being looked up (beyond it a
// new name fails at once as busy), callers waiting, addresses per name and
// the length of a name (DNS allows 253 characters).
//
// Thread-safety: Resolve, the callbacks and Lookup handles belong to the
// executor's (one) thread; only the pool threads run the blocking lookup,
// and they hand its answer back by posting to that executor. The pool
// threads are detached: destroying the resolver never waits for a
// getaddrinfo that is still running; its answer is then dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/status_or.h"

namespace kvpeer::daemon {

// Why a name gave no address.
enum class ResolveFailure {
  kTimedOut,  // no answer within the caller's timeout
  kNotFound,  // the name does not exist or has no address
  kFailed,    // the lookup itself failed (server failure, no server, ...)
  kBusy,      // too many names are being looked up at once
  kBadName,   // too long to be a DNS name
};

// What the blocking lookup found for a host: addresses, or a failure and
// its description.
struct HostAddresses {
  std::vector<boost::asio::ip::address> addresses;
  std::optional<ResolveFailure> failure;
  std::string detail;  // what failed, e.g. getaddrinfo's message
};

// What a caller gets: the endpoints (the addresses with its port), or a
// failed Status whose message names the host and whose code says which
// ResolveFailure it was (ResolveFailureCode).
using ResolvedEndpoints = StatusOr<std::vector<boost::asio::ip::tcp::endpoint>>;

// kNotFound: NotFound; kBadName: Invalid; kBusy: Conflict (a limit);
// kTimedOut and kFailed: Unavailable (try again later).
Status::Code ResolveFailureCode(ResolveFailure failure);

// getaddrinfo(host) for TCP, as Asio's resolver asks it (AI_ADDRCONFIG).
HostAddresses LookUpHost(const std::string& host);

class PeerResolver {
 public:
  struct Options {
    size_t threads = 4;                            // pool threads at most (started as needed)
    std::chrono::milliseconds timeout{5000};       // per caller
    std::chrono::milliseconds ttl{30000};          // a found address is reused this long
    std::chrono::milliseconds negative_ttl{2000};  // a failure is repeated this long
    size_t max_cached = 1024;                      // names in the cache
    size_t max_in_flight = 64;                     // distinct names being looked up
    size_t max_waiting = 4096;                     // callers waiting, in all
    size_t max_addresses = 16;                     // kept per name
    // The blocking lookup the pool runs; LookUpHost when empty (tests
    // inject a fake).
    std::function<HostAddresses(const std::string& host)> lookup;
  };
  // Destroying the handle takes the lookup back: its callback is dropped
  // without being called.
  class Lookup {
   public:
    virtual ~Lookup() = default;
  };
  using Done = std::function<void(ResolvedEndpoints)>;

  PeerResolver(boost::asio::any_io_executor executor, Options options);
  explicit PeerResolver(boost::asio::any_io_executor executor);
  ~PeerResolver();
  PeerResolver(const PeerResolver&) = delete;
  PeerResolver& operator=(const PeerResolver&) = delete;

  // Calls `done` once, on the executor and never from within Resolve,
  // unless the returned handle is destroyed first.
  std::unique_ptr<Lookup> Resolve(const std::string& host, uint16_t port, Done done);

  // For tests and status: names cached, names being looked up, callers waiting.
  size_t cached() const;
  size_t in_flight() const;
  size_t waiting() const;

  // The implementation (peer_resolver.cc): the executor's side and the threads' side.
  struct Core;
  struct Pool;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace kvpeer::daemon
