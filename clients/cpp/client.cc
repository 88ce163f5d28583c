#include "kvpeer/client.h"

#include "clients/cpp/internal/line_socket.h"

namespace kvpeer {

Client::Client(std::unique_ptr<internal::LineSocket> socket) : socket_(std::move(socket)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Client> Client::Connect(const std::string& socket_path, const ClientOptions& options) {
  Result<std::unique_ptr<internal::LineSocket>> socket = internal::LineSocket::Connect(socket_path, options);
  if (!socket.ok()) return socket.error();
  return Client(std::move(socket).value());
}

void Client::Close() {
  if (socket_) socket_->Close();
}

bool Client::open() const { return socket_ && socket_->open(); }

Result<void> Client::Send(const Request& request) {
  if (!socket_) return Error{ErrorCode::kConnection, "this client was moved from"};
  return socket_->SendLine(request.line, request.fd, request.wait_ms);
}

Result<std::string> Client::ReceiveLine() {
  if (!socket_) return Error{ErrorCode::kConnection, "this client was moved from"};
  return socket_->ReadLine();
}

Result<Answer> Client::Receive() {
  Result<std::string> line = ReceiveLine();
  if (!line.ok()) return line.error();
  return Answer::Parse(std::move(line).value());
}

Result<Answer> Client::Call(const Request& request) {
  if (Result<void> sent = Send(request); !sent.ok()) return sent.error();
  return Receive();
}

namespace {

// Call, then decode: the shape of every one-op method below.
template <class Decode>
auto CallAndDecode(Client& client, const Request& request, Decode decode) -> decltype(decode(std::declval<Answer>())) {
  Result<Answer> answer = client.Call(request);
  if (!answer.ok()) return answer.error();
  return decode(answer.value());
}

}  // namespace

Result<HelloInfo> Client::Hello(const HelloSettings& settings) {
  return CallAndDecode(*this, request::Hello(settings), answer::Hello);
}

Result<RegionInfo> Client::RegisterRegionFd(int fd, uint64_t num_blocks) {
  return CallAndDecode(*this, request::RegisterRegionFd(fd, num_blocks), answer::RegisterRegion);
}

Result<RegionInfo> Client::RegisterRegionPath(std::string_view path, uint64_t num_blocks, uint64_t offset) {
  return CallAndDecode(*this, request::RegisterRegionPath(path, num_blocks, offset), answer::RegisterRegion);
}

Result<uint64_t> Client::Publish(const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids,
                                 bool seal) {
  return CallAndDecode(*this, request::Publish(keys, block_ids, seal), answer::Publish);
}

Result<UnpublishResult> Client::Unpublish(const std::vector<std::string>& keys) {
  return CallAndDecode(*this, request::Unpublish(keys), answer::Unpublish);
}

Result<std::vector<Probe>> Client::Lookup(std::string_view peer, std::string_view kv_request_id,
                                          const std::vector<std::string>& keys, const LookupOptions& options) {
  return CallAndDecode(*this, request::Lookup(peer, kv_request_id, keys, options), answer::Lookup);
}

Result<uint64_t> Client::Flush() { return CallAndDecode(*this, request::Flush(), answer::Flush); }

Result<void> Client::Load(int64_t job_id, std::string_view peer, std::string_view kv_request_id,
                          const std::vector<std::string>& keys, const std::vector<BlockId>& block_ids) {
  return CallAndDecode(*this, request::Load(job_id, peer, kv_request_id, keys, block_ids), answer::Done);
}

Result<void> Client::Store(int64_t job_id, std::string_view kv_request_id, const std::vector<std::string>& keys,
                           const std::vector<BlockId>& block_ids, bool seal) {
  return CallAndDecode(*this, request::Store(job_id, kv_request_id, keys, block_ids, seal), answer::Done);
}

Result<void> Client::Finish(std::string_view kv_request_id) {
  return CallAndDecode(*this, request::Finish(kv_request_id), answer::Done);
}

Result<PollReport> Client::Poll(uint32_t wait_ms) { return CallAndDecode(*this, request::Poll(wait_ms), answer::Poll); }

Result<Answer> Client::Status() {
  Result<Answer> answer = Call(request::Status());
  if (!answer.ok()) return answer;
  if (Result<void> status = answer.value().Status(); !status.ok()) return status.error();
  return answer;
}

Result<void> Client::ConnectPeer(std::string_view peer) {
  return CallAndDecode(*this, request::Connect(peer), answer::Done);
}

}  // namespace kvpeer
