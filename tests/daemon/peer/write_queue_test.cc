// WriteQueue driven with plain calls: the byte count backpressure reads, the
// control batch (its frame and byte bounds, the frame begun while the
// session is over), the synchronous front write's gathering and partial
// progress (a frame the socket took part of is finished before anything
// else), what a lingering connection keeps, and a transfer_done turned
// into a failure (daemon/peer/write_queue.h).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "daemon/peer/write_queue.h"
#include "protocol/frame.h"

namespace kvpeer::daemon {
namespace {

class BytesPin : public session::PinnedBlock {
 public:
  explicit BytesPin(size_t n) : bytes_(n, 7) {}
  std::span<const uint8_t> bytes() const override { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

session::OutFrame Ping(const std::string& nonce) { return session::OutFrame{protocol::Ping{nonce}, {}}; }

session::OutFrame Data(protocol::RoundSeq round) {
  protocol::BlockData data;
  data.kv_request_id = "r";
  data.round_seq = round;
  data.block_indexes = {0};
  return session::OutFrame{data, {std::make_shared<BytesPin>(64)}};
}

session::OutFrame Done(protocol::RoundSeq round) {
  return session::OutFrame{protocol::TransferDone{"r", true, round}, {}};
}

session::OutFrame Bye() { return session::OutFrame{protocol::Disconnect{"bye"}, {}}; }

std::vector<std::string> Types(const std::vector<QueuedFrame>& frames) {
  std::vector<std::string> types;
  for (const QueuedFrame& queued : frames) types.emplace_back(protocol::TypeName(queued.frame.message));
  return types;
}

size_t GatheredBytes(const std::vector<boost::asio::const_buffer>& buffers) {
  size_t total = 0;
  for (const auto& buffer : buffers) total += buffer.size();
  return total;
}

TEST_CASE("write queue: bytes are the encoded heads, the payload is not counted", "[write_queue]") {
  WriteQueue queue;
  queue.Push(Ping("a"));
  const uint64_t ping = protocol::EncodeFrame(protocol::Ping{"a"}, 0).size();
  CHECK(queue.bytes() == ping);
  const session::OutFrame data_frame = Data(1);
  const uint64_t data_head = protocol::EncodeFrame(data_frame.message, 64).size();
  queue.Push(data_frame);
  CHECK(queue.bytes() == ping + data_head);  // the 64 payload bytes stay in their pinned block
  CHECK(queue.bytes_peak() == queue.bytes());
  CHECK_FALSE(queue.front_is_data());
  std::vector<QueuedFrame> batch;
  queue.TakeControlBatch(batch, false);
  CHECK(Types(batch) == std::vector<std::string>{"ping"});
  CHECK(queue.front_is_data());  // a batch stops at a data frame
  const QueuedFrame data = queue.PopData();
  CHECK(data.is_data());
  CHECK(queue.empty());
  CHECK(queue.bytes() == 0);
  CHECK(queue.bytes_peak() > ping);  // the peak stays
}

TEST_CASE("write queue: a control batch holds at most 64 frames, or 64 KiB unless one frame", "[write_queue]") {
  WriteQueue queue;
  for (int i = 0; i < 70; ++i) queue.Push(Ping(std::to_string(i)));
  std::vector<QueuedFrame> batch;
  queue.TakeControlBatch(batch, false);
  CHECK(batch.size() == WriteQueue::kMaxGatheredFrames);
  CHECK(queue.size() == 6);

  WriteQueue big;
  big.Push(Ping(std::string(40 * 1024, 'x')));
  big.Push(Ping(std::string(40 * 1024, 'y')));
  big.TakeControlBatch(batch, false);
  CHECK(batch.size() == 1);  // the second would pass 64 KiB
  big.TakeControlBatch(batch, false);
  CHECK(batch.size() == 1);  // alone it goes, whatever its size
  CHECK(big.empty());
}

TEST_CASE("write queue: the front write finishes a frame the socket took part of first", "[write_queue]") {
  WriteQueue queue;
  queue.Push(Ping("a"));
  queue.Push(Ping("b"));
  queue.Push(Data(1));
  queue.Push(Ping("c"));
  std::vector<boost::asio::const_buffer> buffers;
  queue.GatherControlFront(buffers);
  REQUIRE(buffers.size() == 2);  // up to the data frame: it needs the writer's torn-source handling
  const size_t first = protocol::EncodeFrame(protocol::Ping{"a"}, 0).size();
  std::vector<std::string> sent;
  auto note = [&](const QueuedFrame& queued) { sent.emplace_back(protocol::TypeName(queued.frame.message)); };

  queue.ConsumeFront(first + 3, note);  // the socket took "a" and 3 bytes of "b"
  CHECK(sent == std::vector<std::string>{"ping"});
  CHECK(queue.front_half_written());
  queue.GatherControlFront(buffers);
  REQUIRE(buffers.size() == 1);
  CHECK(GatheredBytes(buffers) == first - 3);  // only the rest of "b"

  // A closing session takes only the frame begun; the rest goes with the session.
  std::vector<QueuedFrame> batch;
  queue.TakeControlBatch(batch, true);
  REQUIRE(batch.size() == 1);
  CHECK(batch[0].written == 3);
  queue.TakeControlBatch(batch, true);
  CHECK(batch.empty());
}

TEST_CASE("write queue: a lingering connection keeps the frame begun and the disconnect", "[write_queue]") {
  WriteQueue queue;
  queue.Push(Ping("a"));
  queue.Push(Data(1));
  queue.Push(Done(1));
  queue.Push(Bye());
  queue.ConsumeFront(2, [](const QueuedFrame&) {});  // "a" is begun
  queue.KeepForLinger();
  REQUIRE(queue.size() == 2);
  CHECK(queue.front_half_written());
  std::vector<QueuedFrame> batch;
  queue.TakeControlBatch(batch, true);
  CHECK(Types(batch) == std::vector<std::string>{"ping"});
  CHECK(queue.bytes() == protocol::EncodeFrame(protocol::Disconnect{"bye"}, 0).size());
  std::vector<boost::asio::const_buffer> buffers;
  queue.GatherControlFront(buffers);
  CHECK(GatheredBytes(buffers) == queue.bytes());  // the disconnect alone: the last words
}

TEST_CASE("write queue: a round not served turns its queued transfer_done into a failure", "[write_queue]") {
  WriteQueue queue;
  queue.Push(Done(1));
  queue.Push(Done(2));
  CHECK(queue.FailTransferDone("r", 2));
  CHECK_FALSE(queue.FailTransferDone("r", 3));
  CHECK_FALSE(queue.FailTransferDone("r", 2));  // already a failure
  const uint64_t recounted = queue.bytes();
  std::vector<QueuedFrame> batch;
  queue.TakeControlBatch(batch, false);
  REQUIRE(batch.size() == 2);
  CHECK(std::get<protocol::TransferDone>(batch[0].frame.message).success);
  CHECK_FALSE(std::get<protocol::TransferDone>(batch[1].frame.message).success);
  CHECK(batch[1].head == protocol::EncodeFrame(batch[1].frame.message, 0));
  CHECK(recounted == batch[0].head.size() + batch[1].head.size());  // the new head is counted
  CHECK(queue.bytes() == 0);
}

}  // namespace
}  // namespace kvpeer::daemon
