// Test harness for the control side of the daemon: a real ControlServer on a
// real Unix socket, over a real NodePublishedBlocks and EngineRegistry, with a
// recording PeerService standing in for the peer side (which has its own
// tests), and a non-blocking client that pumps the io_context while it
// waits, so everything runs on the test's one thread.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/node/published_blocks.h"
#include "daemon/control/control_server.h"
#include "daemon/control/engine_registry.h"
#include "daemon/node/node_model.h"
#include "daemon/node/peer_service.h"
#include "base/unique_fd.h"
#include "kvpeer/descriptor_passing.h"

namespace kvpeer::daemon::testing {

namespace json = boost::json;

// A unique path for a socket or a shared-memory file of this process.
inline std::string TempPath(const std::string& dir, const std::string& suffix) {
  static std::atomic<int> counter{0};
  return dir + "/kvpeer-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + suffix;
}

inline std::string ShmDir() { return ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; }

// A file of `size` bytes under /dev/shm, removed on destruction.
class ShmFile {
 public:
  explicit ShmFile(uint64_t size) : path_(TempPath(ShmDir(), ".shm")) {
    UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid() || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throw std::runtime_error("shm file");
  }
  ~ShmFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  // Writes `bytes` at `offset` through a fresh descriptor (as the engine would).
  void Write(uint64_t offset, const std::string& bytes) const {
    UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CLOEXEC));
    if (::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset)) != ssize_t(bytes.size())) {
      throw std::runtime_error("pwrite");
    }
  }
  // Shrinks (or grows) the file, as an engine that truncated its region.
  void Truncate(uint64_t size) const {
    if (::truncate(path_.c_str(), static_cast<off_t>(size)) != 0) throw std::runtime_error("truncate");
  }
  std::string Read(uint64_t offset, size_t size) const {
    UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    std::string bytes(size, '\0');
    if (::pread(fd.get(), bytes.data(), size, static_cast<off_t>(offset)) != ssize_t(size)) {
      throw std::runtime_error("pread");
    }
    return bytes;
  }

 private:
  std::string path_;
};

inline UniqueFd MakeMemfd(uint64_t size) {
  UniqueFd fd(::memfd_create("kvpeer-test", MFD_CLOEXEC));
  if (!fd.valid() || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throw std::runtime_error("memfd");
  return fd;
}

// Records every call; answers as scripted.
class FakePeers : public PeerService {
 public:
  struct LoadCall {
    session::JobId job;
    std::string peer;
    std::string kv_request_id;
    std::vector<protocol::Key> keys;
    std::vector<protocol::SlotIndex> block_ids;
    session::SlotSinkRef sink;
  };
  struct StoreCall {
    session::JobId job;
    std::string kv_request_id;
    std::vector<protocol::Key> keys;
    std::vector<session::PinRef> pins;
  };

  explicit FakePeers(ResultSink& results) : results_(results) {}

  Status Lookup(const std::string& peer, const std::string& kv_request_id, const std::vector<protocol::Key>& keys,
                bool flush, std::vector<session::ProbeAnswer>* answers) override {
    lookups.push_back({peer, kv_request_id, keys.size(), flush});
    if (!lookup_status.ok()) return lookup_status;
    for (const protocol::Key& key : keys) {
      auto it = answer_for.find(key);
      answers->push_back(it == answer_for.end() ? session::ProbeAnswer::kRetry : it->second);
    }
    return Status::Ok();
  }
  size_t FlushLookups() override { return ++flushes; }
  Status Load(session::JobId job_id, const std::string& peer, const std::string& kv_request_id,
              std::vector<protocol::Key> keys, std::vector<protocol::SlotIndex> block_ids,
              session::SlotSinkRef sink) override {
    if (!load_status.ok()) return load_status;
    loads.push_back({job_id, peer, kv_request_id, std::move(keys), std::move(block_ids), std::move(sink)});
    return Status::Ok();
  }
  void Store(session::JobId job_id, const std::string& kv_request_id, std::vector<protocol::Key> keys,
             std::vector<session::PinRef> blocks) override {
    stores.push_back({job_id, kv_request_id, std::move(keys), std::move(blocks)});
  }
  // Like the real peer side: in-flight loads of the request end with a
  // failure result at once.
  void Finish(const std::string& kv_request_id, const std::vector<std::string>&, bool producer) override {
    finished.push_back(kv_request_id);
    finished_as_producer.push_back(producer);
    for (auto it = loads.begin(); it != loads.end();) {
      if (it->kv_request_id != kv_request_id) {
        ++it;
        continue;
      }
      const session::JobId job = it->job;
      it = loads.erase(it);
      results_.OnLoadResult({job, kv_request_id, false, "finished"});
    }
  }
  void Connect(const std::string& peer, std::function<void(Status)> done) override {
    connects.push_back(peer);
    connect_done = std::move(done);
    if (connect_status) connect_done(*connect_status);
  }
  Status Disconnect(const std::string& peer) override {
    disconnects.push_back(peer);
    return disconnect_status;
  }
  std::vector<PeerSnapshot> PeerSnapshots() const override {
    PeerSnapshot peer;
    peer.peer_id = "node-b:5710";
    peer.state = PeerState::kReady;
    peer.counters.bytes_sent = 10;
    peer.counters.bytes_received = 20;
    return {peer};
  }

  // Ends a recorded load with `success`.
  void EndLoad(size_t index, bool success, const std::string& reason = "") {
    LoadCall call = std::move(loads.at(index));
    loads.erase(loads.begin() + static_cast<long>(index));
    results_.OnLoadResult({call.job, call.kv_request_id, success, reason});
  }

  // The peer's lookup_resp for `key` arrives now: lookups waiting on `peer` wake.
  void Answer(const std::string& peer, const protocol::Key& key, session::ProbeAnswer answer) {
    answer_for[key] = answer;
    results_.OnProbesChanged(peer, false);
  }
  // The session with `peer` ends (answers stay as answer_for says).
  void EndSession(const std::string& peer) { results_.OnProbesChanged(peer, true); }

  struct LookupCall {
    std::string peer;
    std::string kv_request_id;
    size_t keys;
    bool flush;
  };
  std::vector<LookupCall> lookups;
  std::vector<LoadCall> loads;
  std::vector<StoreCall> stores;
  std::vector<std::string> finished;
  std::vector<bool> finished_as_producer;  // Finish's `producer`, one per finished entry
  std::vector<std::string> connects;
  std::vector<std::string> disconnects;
  size_t flushes = 0;
  std::map<protocol::Key, session::ProbeAnswer> answer_for;  // by raw key; default retry
  Status lookup_status;
  Status load_status;
  std::optional<Status> connect_status;  // answer at once; unset = keep connect_done
  std::function<void(Status)> connect_done;
  Status disconnect_status = Status::NotFound("no session with that peer");

 private:
  ResultSink& results_;
};

constexpr uint64_t kBlockLen = 64;
constexpr uint64_t kNumBlocks = 8;

// The daemon's control side on one io_context, with the node's block_len
// configured and the other settings left to the first hello.
class Daemon {
 public:
  explicit Daemon(ControlServerOptions options = Options())
      : model_(kBlockLen, std::nullopt, std::nullopt),
        registry_(io_.get_executor(), model_, index_, "node-a:5710"),
        peers_(registry_),
        server_(io_, std::move(options), registry_) {
    spdlog::set_level(spdlog::level::warn);  // connection and engine logs would drown the test output
    registry_.set_peer_service(&peers_);
    if (Status failed = server_.Start(); !failed.ok()) throw std::runtime_error(failed.message());
  }
  ~Daemon() {
    server_.Stop();
    Pump(std::chrono::milliseconds(5));
  }

  // Runs the daemon's handlers for about `time`.
  void Pump(std::chrono::milliseconds time = std::chrono::milliseconds(1)) {
    if (io_.stopped()) io_.restart();
    io_.run_for(time);
  }

  const std::string& socket_path() const { return server_.socket_path(); }
  NodePublishedBlocks& index() { return index_; }
  EngineRegistry& registry() { return registry_; }
  FakePeers& peers() { return peers_; }
  ControlServer& server() { return server_; }

  static ControlServerOptions Options() {
    ControlServerOptions options;
    options.socket_path = TempPath("/tmp", ".sock");
    options.node_id = "node-a:5710";
    options.listen = "127.0.0.1:5710";
    options.config = json::object{{"listen", "127.0.0.1:5710"}, {"block-len-test", 64}};
    return options;
  }

 private:
  boost::asio::io_context io_;
  NodeModel model_;
  NodePublishedBlocks index_;
  EngineRegistry registry_;
  FakePeers peers_;
  ControlServer server_;
};

// A control socket client that pumps the daemon while it waits.
class Client {
 public:
  explicit Client(Daemon& daemon) : daemon_(daemon) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, daemon.socket_path().c_str(), sizeof(address.sun_path) - 1);
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("connect: " + std::string(std::strerror(errno)));
    }
    ::fcntl(fd_.get(), F_SETFL, O_NONBLOCK);
  }

  // Sends `bytes` as one sendmsg, with `fd` attached when >= 0.
  void SendWithFd(const std::string& bytes, int fd) {
    if (kvpeer::SendWithDescriptor(fd_.get(), bytes, fd) != ssize_t(bytes.size())) throw std::runtime_error("sendmsg");
  }

  // Writes everything, pumping the daemon while the socket is full; stops
  // early when the daemon closes (EPIPE). Returns bytes written.
  size_t Send(const std::string& bytes) {
    size_t sent = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (sent < bytes.size() && std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      daemon_.Pump();
      ReadAvailable();
    }
    return sent;
  }

  // Writes as much of `bytes` as the daemon takes within `time`, pumping it
  // but never reading a response. Returns bytes written.
  size_t SendWithoutReading(const std::string& bytes, std::chrono::milliseconds time) {
    size_t sent = 0;
    auto deadline = std::chrono::steady_clock::now() + time;
    while (sent < bytes.size() && std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      daemon_.Pump();
    }
    return sent;
  }

  // The next response line, pumping the daemon until it arrives; nullopt
  // after `timeout` or when the connection closed first.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (size_t newline = input_.find('\n'); newline != std::string::npos) {
        std::string line = input_.substr(0, newline);
        input_.erase(0, newline + 1);
        return line;
      }
      if (closed_ || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      daemon_.Pump();
      ReadAvailable();
    }
  }

  // Sends one request and returns its parsed response.
  json::object Call(const json::object& request) {
    Send(json::serialize(request) + "\n");
    return Response();
  }
  json::object Response() {
    std::optional<std::string> line = ReadLine();
    if (!line) throw std::runtime_error("no response");
    return json::parse(*line).as_object();
  }

  // True once the daemon has closed the connection (within `timeout`).
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && std::chrono::steady_clock::now() < deadline) {
      daemon_.Pump();
      ReadAvailable();
    }
    return closed_;
  }

  void ShutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }
  void Close() { fd_.Reset(); }

 private:
  void ReadAvailable() {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_.get(), buffer, sizeof(buffer), 0);
      if (n > 0) {
        input_.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed_ = true;
      return;
    }
  }

  Daemon& daemon_;
  UniqueFd fd_;
  std::string input_;
  bool closed_ = false;
};

// Runs `io` in slices of 5 ms until `done` holds; false after 10 s.
inline bool RunUntil(boost::asio::io_context& io, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The error code of a failed response ("" when it succeeded).
inline std::string ErrorCodeOf(const json::object& response) {
  if (response.at("ok").as_bool()) return "";
  return std::string(response.at("error").at("code").as_string());
}

inline std::string MessageOf(const json::object& response) {
  return std::string(response.at("error").at("message").as_string());
}

inline json::object Hello(const std::string& client = "engine-1") {
  return {
      {"op", "hello"},        {"id", 1}, {"client", client}, {"block_len", kBlockLen}, {"config_fingerprint", "fp-1"},
      {"hash_seed", "seed-1"}};
}

// An engine that said hello and registered a region file.
struct Engine {
  explicit Engine(Daemon& daemon, const std::string& name = "engine-1")
      : client(daemon), region(kNumBlocks * kBlockLen) {
    json::object hello = client.Call(Hello(name));
    if (!hello.at("ok").as_bool()) throw std::runtime_error("hello: " + json::serialize(hello));
    json::object registered =
        client.Call({{"op", "register_region"}, {"path", region.path()}, {"num_blocks", kNumBlocks}});
    if (!registered.at("ok").as_bool()) throw std::runtime_error("register: " + json::serialize(registered));
  }
  Client client;
  ShmFile region;
};

}  // namespace kvpeer::daemon::testing
