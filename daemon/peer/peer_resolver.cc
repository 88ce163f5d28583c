#include "daemon/peer/peer_resolver.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/host_port.h"

namespace kvpeer::daemon {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

HostAddresses LookUpHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* list = nullptr;
  HostAddresses found;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0) {
    const bool missing = rc == EAI_NONAME
#ifdef EAI_NODATA
                         || rc == EAI_NODATA
#endif
        ;
    found.failure = missing ? ResolveFailure::kNotFound : ResolveFailure::kFailed;
    found.detail = rc == EAI_SYSTEM ? std::system_category().message(errno) : ::gai_strerror(rc);
    return found;
  }
  for (const addrinfo* entry = list; entry != nullptr; entry = entry->ai_next) {
    asio::ip::address address;
    if (entry->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(entry->ai_addr);
      asio::ip::address_v4::bytes_type bytes;
      std::memcpy(bytes.data(), &in->sin_addr, bytes.size());
      address = asio::ip::address_v4(bytes);
    } else if (entry->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), &in6->sin6_addr, bytes.size());
      address = asio::ip::address_v6(bytes, in6->sin6_scope_id);
    } else {
      continue;
    }
    if (std::find(found.addresses.begin(), found.addresses.end(), address) == found.addresses.end())
      found.addresses.push_back(address);
  }
  ::freeaddrinfo(list);
  if (found.addresses.empty()) {
    found.failure = ResolveFailure::kNotFound;
    found.detail = "no IPv4 or IPv6 address";
  }
  return found;
}

Status::Code ResolveFailureCode(ResolveFailure failure) {
  switch (failure) {
    case ResolveFailure::kNotFound:
      return Status::Code::kNotFound;
    case ResolveFailure::kBadName:
      return Status::Code::kInvalid;
    case ResolveFailure::kBusy:
      return Status::Code::kConflict;
    case ResolveFailure::kTimedOut:
    case ResolveFailure::kFailed:
      break;
  }
  return Status::Code::kUnavailable;
}

namespace {

// One caller of Resolve. Its handle owns it; the resolver refers to it
// while it waits.
struct Waiter {
  Waiter(asio::any_io_executor executor, std::string host, uint16_t port, PeerResolver::Done done)
      : host(std::move(host)), port(port), done(std::move(done)), timer(std::move(executor)) {}
  std::string host;
  uint16_t port;
  PeerResolver::Done done;  // emptied once called or taken back
  asio::steady_timer timer;
};

// Calls the waiter's callback at most once.
void Deliver(Waiter& waiter, ResolvedEndpoints outcome) {
  PeerResolver::Done done = std::exchange(waiter.done, nullptr);
  waiter.timer.cancel();
  if (done) done(std::move(outcome));
}

Status Failed(const std::string& host, ResolveFailure failure, const std::string& detail) {
  const std::string message = "name resolution of " + host + " " + detail;
  switch (ResolveFailureCode(failure)) {
    case Status::Code::kNotFound:
      return Status::NotFound(message);
    case Status::Code::kInvalid:
      return Status::Invalid(message);
    case Status::Code::kConflict:
      return Status::Conflict(message);
    default:
      return Status::Unavailable(message);
  }
}

ResolvedEndpoints OutcomeFor(const Waiter& waiter, const HostAddresses& answer) {
  if (answer.failure) return Failed(waiter.host, *answer.failure, "failed: " + answer.detail);
  std::vector<asio::ip::tcp::endpoint> endpoints;
  for (const asio::ip::address& address : answer.addresses) endpoints.emplace_back(address, waiter.port);
  return endpoints;
}

std::string Seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

}  // namespace

// The threads' side: names to look up, handed to whichever thread is idle.
struct PeerResolver::Pool : std::enable_shared_from_this<Pool> {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::string> jobs;
  size_t threads = 0;
  size_t idle = 0;
  size_t max_threads = 1;
  bool stopped = false;
  std::optional<asio::any_io_executor> executor;  // reset when the resolver goes
  std::function<HostAddresses(const std::string&)> lookup;
  std::weak_ptr<Core> core;

  void Submit(std::string host);
  void Run();
  void Stop();
};

// The executor's side: the cache and the callers waiting per name.
struct PeerResolver::Core : std::enable_shared_from_this<Core> {
  struct Cached {
    HostAddresses answer;
    Clock::time_point expires;
  };

  Core(asio::any_io_executor executor, Options options) : executor(std::move(executor)), options(std::move(options)) {}

  std::unique_ptr<Lookup> Resolve(const std::string& host, uint16_t port, Done done);
  // Answers on the next turn of the event loop, not from within Resolve.
  void AnswerSoon(const std::shared_ptr<Waiter>& waiter, ResolvedEndpoints outcome);
  void Wait(const std::shared_ptr<Waiter>& waiter);
  void Complete(const std::string& host, const HostAddresses& answer);
  void TimedOut(const std::shared_ptr<Waiter>& waiter);
  void Forget(const std::shared_ptr<Waiter>& waiter);
  const Cached* FindFresh(const std::string& host);
  void Remember(const std::string& host, HostAddresses answer);

  asio::any_io_executor executor;
  Options options;
  std::shared_ptr<Pool> pool;
  std::map<std::string, Cached> cache;
  // Names being looked up -> their waiting callers (possibly none: every
  // caller gave up, the thread has not answered yet).
  std::map<std::string, std::vector<std::shared_ptr<Waiter>>> in_flight;
  size_t waiting = 0;
};

namespace {

class LookupHandle : public PeerResolver::Lookup {
 public:
  LookupHandle(std::weak_ptr<PeerResolver::Core> core, std::shared_ptr<Waiter> waiter)
      : core_(std::move(core)), waiter_(std::move(waiter)) {}
  ~LookupHandle() override;

 private:
  std::weak_ptr<PeerResolver::Core> core_;
  std::shared_ptr<Waiter> waiter_;
};

}  // namespace

// ---------------------------------------------------------------------------
// Pool

void PeerResolver::Pool::Submit(std::string host) {
  std::lock_guard lock(mutex);
  jobs.push_back(std::move(host));
  if (idle < jobs.size() && threads < max_threads) {
    try {
      std::thread([self = shared_from_this()] { self->Run(); }).detach();
      ++threads;
    } catch (const std::system_error&) {
      // No thread now: the job waits for a running one; its callers' timeouts still fire.
    }
  }
  wake.notify_one();
}

void PeerResolver::Pool::Run() {
  std::unique_lock lock(mutex);
  for (;;) {
    ++idle;
    wake.wait(lock, [this] { return stopped || !jobs.empty(); });
    --idle;
    if (stopped) break;
    std::string host = std::move(jobs.front());
    jobs.pop_front();
    lock.unlock();
    HostAddresses answer = lookup(host);
    lock.lock();
    if (!executor) break;
    asio::post(*executor, [core = core, host = std::move(host), answer = std::move(answer)] {
      if (auto alive = core.lock()) alive->Complete(host, answer);
    });
  }
  --threads;
}

void PeerResolver::Pool::Stop() {
  std::lock_guard lock(mutex);
  stopped = true;
  executor.reset();
  jobs.clear();
  wake.notify_all();
}

// ---------------------------------------------------------------------------
// Core

std::unique_ptr<PeerResolver::Lookup> PeerResolver::Core::Resolve(const std::string& host, uint16_t port, Done done) {
  auto waiter = std::make_shared<Waiter>(executor, host, port, std::move(done));
  auto handle = std::make_unique<LookupHandle>(weak_from_this(), waiter);
  boost::system::error_code not_literal;
  const asio::ip::address literal = asio::ip::make_address(host, not_literal);
  if (!not_literal) {
    AnswerSoon(waiter, std::vector<asio::ip::tcp::endpoint>{asio::ip::tcp::endpoint(literal, port)});
  } else if (host.empty() || host.size() > kMaxHostnameChars) {
    AnswerSoon(waiter, Failed(host.substr(0, 64) + (host.size() > 64 ? "..." : ""), ResolveFailure::kBadName,
                              "refused: a host name has 1 to " + std::to_string(kMaxHostnameChars) +
                                  " characters, this one has " + std::to_string(host.size())));
  } else if (const Cached* cached = FindFresh(host)) {
    AnswerSoon(waiter, OutcomeFor(*waiter, cached->answer));
  } else if (waiting >= options.max_waiting ||
             (!in_flight.contains(host) && in_flight.size() >= options.max_in_flight)) {
    AnswerSoon(waiter, Failed(host, ResolveFailure::kBusy,
                              "refused: the resolver is busy (" + std::to_string(in_flight.size()) +
                                  " names being looked up, " + std::to_string(waiting) + " callers waiting)"));
  } else {
    Wait(waiter);
  }
  return handle;
}

void PeerResolver::Core::AnswerSoon(const std::shared_ptr<Waiter>& waiter, ResolvedEndpoints outcome) {
  asio::post(executor, [weak = std::weak_ptr<Waiter>(waiter), outcome = std::move(outcome)]() mutable {
    if (auto alive = weak.lock()) Deliver(*alive, std::move(outcome));
  });
}

void PeerResolver::Core::Wait(const std::shared_ptr<Waiter>& waiter) {
  auto [slot, first] = in_flight.try_emplace(waiter->host);
  slot->second.push_back(waiter);
  ++waiting;
  waiter->timer.expires_after(options.timeout);
  waiter->timer.async_wait(
      [core = weak_from_this(), weak = std::weak_ptr<Waiter>(waiter)](boost::system::error_code ec) {
        if (ec) return;
        auto alive_core = core.lock();
        auto alive = weak.lock();
        if (alive_core && alive) alive_core->TimedOut(alive);
      });
  if (first) pool->Submit(waiter->host);
}

void PeerResolver::Core::TimedOut(const std::shared_ptr<Waiter>& waiter) {
  if (!waiter->done) return;
  Forget(waiter);
  Deliver(*waiter, Failed(waiter->host, ResolveFailure::kTimedOut, "timed out after " + Seconds(options.timeout)));
}

void PeerResolver::Core::Forget(const std::shared_ptr<Waiter>& waiter) {
  auto slot = in_flight.find(waiter->host);
  if (slot == in_flight.end()) return;
  auto& waiters = slot->second;
  auto it = std::find(waiters.begin(), waiters.end(), waiter);
  if (it == waiters.end()) return;
  waiters.erase(it);
  --waiting;
}

void PeerResolver::Core::Complete(const std::string& host, const HostAddresses& answer) {
  HostAddresses kept = answer;
  if (kept.addresses.size() > options.max_addresses) kept.addresses.resize(options.max_addresses);
  Remember(host, kept);
  auto node = in_flight.extract(host);
  if (node.empty()) return;
  // Out of the table first: a callback may start or drop other lookups.
  for (const std::shared_ptr<Waiter>& waiter : node.mapped()) {
    --waiting;
    Deliver(*waiter, OutcomeFor(*waiter, kept));
  }
}

const PeerResolver::Core::Cached* PeerResolver::Core::FindFresh(const std::string& host) {
  auto it = cache.find(host);
  if (it == cache.end()) return nullptr;
  if (Clock::now() < it->second.expires) return &it->second;
  cache.erase(it);
  return nullptr;
}

void PeerResolver::Core::Remember(const std::string& host, HostAddresses answer) {
  const auto ttl = answer.failure ? options.negative_ttl : options.ttl;
  if (ttl.count() <= 0 || options.max_cached == 0) return;
  const Clock::time_point now = Clock::now();
  if (!cache.contains(host) && cache.size() >= options.max_cached) {
    std::erase_if(cache, [now](const auto& entry) { return entry.second.expires <= now; });
    if (cache.size() >= options.max_cached) {
      auto soonest = std::min_element(cache.begin(), cache.end(),
                                      [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; });
      cache.erase(soonest);
    }
  }
  cache[host] = Cached{std::move(answer), now + ttl};
}

LookupHandle::~LookupHandle() {
  waiter_->done = nullptr;  // what the callback holds goes now
  waiter_->timer.cancel();
  if (auto core = core_.lock()) core->Forget(waiter_);
}

// ---------------------------------------------------------------------------
// PeerResolver

PeerResolver::PeerResolver(asio::any_io_executor executor) : PeerResolver(std::move(executor), Options{}) {}

PeerResolver::PeerResolver(asio::any_io_executor executor, Options options)
    : core_(std::make_shared<Core>(executor, std::move(options))) {
  auto pool = std::make_shared<Pool>();
  pool->max_threads = std::max<size_t>(1, core_->options.threads);
  pool->executor = executor;
  pool->lookup = core_->options.lookup ? core_->options.lookup : LookUpHost;
  pool->core = core_;
  core_->pool = std::move(pool);
}

PeerResolver::~PeerResolver() { core_->pool->Stop(); }

std::unique_ptr<PeerResolver::Lookup> PeerResolver::Resolve(const std::string& host, uint16_t port, Done done) {
  return core_->Resolve(host, port, std::move(done));
}

size_t PeerResolver::cached() const { return core_->cache.size(); }
size_t PeerResolver::in_flight() const { return core_->in_flight.size(); }
size_t PeerResolver::waiting() const { return core_->waiting; }

}  // namespace kvpeer::daemon
