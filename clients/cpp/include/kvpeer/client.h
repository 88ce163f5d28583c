// kvpeer's C++ client: an engine's session with its node's kvpeerd over the
// control socket (control-api.md). One Client is one connection, and one
// engine session once `Hello` succeeded.
//
//   auto client = kvpeer::Client::Connect("/run/kvpeer/kvpeerd.sock");
//   if (!client.ok()) return fail(client.error().message);
//   kvpeer::Client& kv = client.value();
//   kv.Hello({"my-engine", block_len, fingerprint, seed});
//   kv.RegisterRegionFd(memfd, num_blocks);
//   auto probes = kv.Lookup(peer, request_id, keys, {.wait_ms = 1000});
//
// Calls block until their answer has arrived (lookup and poll with wait_ms
// wait up to that long), but never longer than the client's deadlines
// (ClientOptions): a daemon that stops answering costs the caller a
// kTimeout, and an answer line longer than the API's 16 MiB is kBadAnswer,
// not unbounded memory; both close the client. For many requests at once, pipeline: Send several
// request:: lines, then Receive their answers in order and decode them with
// answer:: (answers come in request order, control-api.md section 1). Keep
// the unanswered requests within the socket buffers' worth (a few hundred
// short lines): the daemon stops reading a connection whose answers are not
// read.
//
// Failures are values (result.h). A kConnection error leaves the Client
// closed; every other error leaves it usable.
//
// Thread-safety: none; one Client per thread, or a lock around it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvpeer/answer.h"
#include "kvpeer/request.h"
#include "kvpeer/result.h"
#include "kvpeer/types.h"

namespace kvpeer {

namespace internal {
class LineSocket;
}

// Deadlines and bounds of one Client (issue 25, finding 6: a silent daemon
// blocked the client for ever, and a line without a newline grew without
// bound).
struct ClientOptions {
  // Connecting, including a daemon whose accept queue is full.
  std::chrono::milliseconds connect_timeout{5000};
  // Sending a request, and waiting for its answer beyond the wait the
  // request asks for (`wait_ms` of poll and lookup). The daemon answers a
  // `connect` op within its handshake timeout (10 s by default).
  std::chrono::milliseconds request_timeout{30000};
  // The longest answer line accepted (control-api.md section 1: 16 MiB).
  size_t max_line_bytes = size_t{16} * 1024 * 1024;
};

class Client {
 public:
  static Result<Client> Connect(const std::string& socket_path, const ClientOptions& options = {});
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Pipelining.
  Result<void> Send(const Request& request);
  Result<Answer> Receive();
  // The next answer line as the daemon wrote it (without the newline), not
  // parsed: for callers that recognise answers by their text.
  Result<std::string> ReceiveLine();
  // Send, then Receive.
  Result<Answer> Call(const Request& request);

  // One op each (control-api.md section 2).
  Result<HelloInfo> Hello(const HelloSettings& settings);
  Result<RegionInfo> RegisterRegionFd(int fd, uint64_t num_blocks);
  Result<RegionInfo> RegisterRegionPath(std::string_view path, uint64_t num_blocks, uint64_t offset = 0);
  Result<uint64_t> Publish(const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids,
                           bool seal = false);
  Result<UnpublishResult> Unpublish(const std::vector<std::string>& keys);
  Result<std::vector<Probe>> Lookup(std::string_view peer, std::string_view kv_request_id,
                                    const std::vector<std::string>& keys, const LookupOptions& options = {});
  Result<uint64_t> Flush();
  Result<void> Load(int64_t job_id, std::string_view peer, std::string_view kv_request_id,
                    const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids);
  Result<void> Store(int64_t job_id, std::string_view kv_request_id, const std::vector<std::string>& keys,
                     const std::vector<BlockId>& block_ids, bool seal = false);
  Result<void> Finish(std::string_view kv_request_id);
  Result<PollReport> Poll(uint32_t wait_ms = 0);
  // Operator ops (section 3): `status` and `metrics` as the answer line.
  Result<Answer> Status();
  Result<void> ConnectPeer(std::string_view peer);

  // Closes the connection: the daemon ends the engine session (finishes its
  // requests, withdraws what it published).
  void Close();
  bool open() const;

 private:
  explicit Client(std::unique_ptr<internal::LineSocket> socket);
  std::unique_ptr<internal::LineSocket> socket_;
};

}  // namespace kvpeer
