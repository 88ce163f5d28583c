#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/codec.h"
#include "protocol/frame.h"
#include "protocol/frame_decoder.h"

namespace kvpeer::protocol {
namespace {

using State = FrameDecoder::State;

constexpr uint64_t kBlockLen = 16;
constexpr size_t kSlots = 8;
constexpr size_t kSlotStride = kBlockLen + 5;  // gaps between slots catch stray writes
constexpr uint8_t kUntouched = 0xee;

const std::string kNonce = "00112233445566778899aabbccddeeff";

std::string Pattern(size_t size, uint8_t seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(seed + 7 * i);
  return bytes;
}

std::string RawFrame(const std::string& header_json, const std::string& payload = "") {
  const auto prefix = EncodePrefix({static_cast<uint32_t>(header_json.size()), payload.size()});
  return std::string(prefix.begin(), prefix.end()) + header_json + payload;
}

std::span<const uint8_t> AsSpan(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// One frame of a test stream and what decoding it must produce.
struct Frame {
  std::string wire;
  Message message;
  std::string payload;
};

Frame Encoded(const Message& message, const std::string& payload = "") {
  return {EncodeFrame(message, payload.size()) + payload, message, payload};
}

std::vector<Frame> MixedStream() {
  const Connect connect{"node-a:7000", 1, 1, "0123456789abcdef0123456789abcdef", kBlockLen, "fp-1", "seed", kNonce, {}};
  const std::string unknown_payload = Pattern(40, 3);
  return {
      Encoded(connect),
      Encoded(Ping{kNonce}),
      Encoded(Lookup{"req-1", {std::string("\x01\x02", 2), "key"}, 7}),
      Encoded(BlockData{"req-1", 8, {3, 0}}, Pattern(2 * kBlockLen, 11)),
      {RawFrame(R"({"type":"from_the_future","extra":[1,2]})", unknown_payload), Unknown{"from_the_future"},
       unknown_payload},
      Encoded(Fetch{"req-1", {"ab"}, {5}, 8}),
      Encoded(BlockData{"req-1", 8, {5}}, Pattern(kBlockLen, 200)),
      Encoded(TransferDone{"req-1", true, 8}),
      Encoded(Disconnect{"bye"}),
  };
}

std::string Concat(const std::vector<Frame>& frames) {
  std::string stream;
  for (const Frame& frame : frames) stream += frame.wire;
  return stream;
}

// Drives a decoder like a connection would: block_data payloads go straight
// into per-index slots of an arena, other payloads are discarded (or kept,
// with buffer_payloads).
class Receiver {
 public:
  explicit Receiver(bool buffer_payloads = false)
      : arena_(kSlots * kSlotStride, kUntouched), buffer_payloads_(buffer_payloads) {}

  void Feed(std::span<const uint8_t> bytes) {
    while (true) {
      bytes = bytes.subspan(decoder_.Feed(bytes));
      Act();
      if (bytes.empty() || decoder_.state() == State::kFailed) return;
    }
  }

  // The pull API: at most `step` bytes per Commit, written straight into
  // WritableSpan().
  void Pull(std::span<const uint8_t> bytes, size_t step) {
    while (!bytes.empty() && decoder_.state() != State::kFailed) {
      const std::span<uint8_t> room = decoder_.WritableSpan();
      const size_t n = std::min({room.size(), bytes.size(), step});
      std::memcpy(room.data(), bytes.data(), n);
      decoder_.Commit(n);
      bytes = bytes.subspan(n);
      Act();
    }
  }

  static std::span<uint8_t> SlotIn(std::vector<uint8_t>& arena, SlotIndex index) {
    return std::span<uint8_t>(arena).subspan(index * kSlotStride, kBlockLen);
  }

  FrameDecoder decoder_{DecodeContext{kBlockLen}};
  std::vector<uint8_t> arena_;
  std::vector<Message> messages_;
  std::vector<std::string> buffered_;

 private:
  void Act() {
    if (decoder_.state() == State::kHeaderReady) Choose();
    if (decoder_.state() == State::kFrameReady) {
      messages_.push_back(decoder_.message());
      const auto payload = decoder_.payload();
      if (buffer_payloads_) buffered_.emplace_back(payload.begin(), payload.end());
      decoder_.NextFrame();
    }
  }

  void Choose() {
    if (buffer_payloads_) return decoder_.BufferPayload();
    const auto* block_data = std::get_if<BlockData>(&decoder_.message());
    if (block_data == nullptr) return decoder_.DiscardPayload();
    std::vector<std::span<uint8_t>> targets;
    for (const SlotIndex index : block_data->block_indexes) targets.push_back(SlotIn(arena_, index));
    decoder_.ReceivePayloadInto(std::move(targets));
  }

  bool buffer_payloads_;
};

std::vector<Message> Messages(const std::vector<Frame>& frames) {
  std::vector<Message> messages;
  for (const Frame& frame : frames) messages.push_back(frame.message);
  return messages;
}

// The arena as it must look once every block_data payload of `frames` landed.
std::vector<uint8_t> ExpectedArena(const std::vector<Frame>& frames) {
  std::vector<uint8_t> arena(kSlots * kSlotStride, kUntouched);
  for (const Frame& frame : frames) {
    const auto* block_data = std::get_if<BlockData>(&frame.message);
    if (block_data == nullptr) continue;
    for (size_t i = 0; i < block_data->block_indexes.size(); ++i) {
      std::memcpy(Receiver::SlotIn(arena, block_data->block_indexes[i]).data(), frame.payload.data() + i * kBlockLen,
                  kBlockLen);
    }
  }
  return arena;
}

void CheckDecodedAll(const Receiver& receiver, const std::vector<Frame>& frames) {
  REQUIRE(receiver.decoder_.state() == State::kReadingPrefix);
  CHECK(receiver.messages_ == Messages(frames));
  CHECK(receiver.arena_ == ExpectedArena(frames));
}

}  // namespace

TEST_CASE("FrameDecoder: a mixed stream split into two chunks at every offset", "[frame_decoder]") {
  const std::vector<Frame> frames = MixedStream();
  const std::string stream = Concat(frames);
  const std::vector<Message> expected_messages = Messages(frames);
  const std::vector<uint8_t> expected_arena = ExpectedArena(frames);
  for (size_t split = 0; split <= stream.size(); ++split) {
    Receiver receiver;
    receiver.Feed(AsSpan(stream).first(split));
    receiver.Feed(AsSpan(stream).subspan(split));
    // One combined check per split keeps thousands of splits fast.
    const bool ok = receiver.decoder_.state() == State::kReadingPrefix && receiver.messages_ == expected_messages &&
                    receiver.arena_ == expected_arena;
    INFO("split at " << split << " of " << stream.size() << ": " << receiver.decoder_.error().message());
    REQUIRE(ok);
  }
}

TEST_CASE("FrameDecoder: a mixed stream fed one byte at a time", "[frame_decoder]") {
  const std::vector<Frame> frames = MixedStream();
  const std::string stream = Concat(frames);
  Receiver receiver;
  for (size_t i = 0; i < stream.size(); ++i) receiver.Feed(AsSpan(stream).subspan(i, 1));
  CheckDecodedAll(receiver, frames);
}

TEST_CASE("FrameDecoder: the pull API with WritableSpan and small commits", "[frame_decoder]") {
  const std::vector<Frame> frames = MixedStream();
  const std::string stream = Concat(frames);
  for (const size_t step : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}}) {
    Receiver receiver;
    receiver.Pull(AsSpan(stream), step);
    INFO("step " << step);
    CheckDecodedAll(receiver, frames);
  }
}

TEST_CASE("FrameDecoder: BufferPayload keeps each payload", "[frame_decoder]") {
  std::vector<Frame> frames = MixedStream();
  const std::string big = Pattern(100 * 1000, 42);  // grows the buffer several times
  frames.push_back({RawFrame(R"({"type":"bulk"})", big), Unknown{"bulk"}, big});
  const std::string stream = Concat(frames);
  Receiver receiver(/*buffer_payloads=*/true);
  for (size_t at = 0; at < stream.size(); at += 997) {
    receiver.Feed(AsSpan(stream).subspan(at, std::min<size_t>(997, stream.size() - at)));
  }
  REQUIRE(receiver.messages_ == Messages(frames));
  for (size_t i = 0; i < frames.size(); ++i) CHECK(receiver.buffered_[i] == frames[i].payload);
}

TEST_CASE("FrameDecoder: Feed stops at kHeaderReady and reports what it consumed", "[frame_decoder]") {
  const std::string first = EncodeFrame(BlockData{"r", 1, {0}}, kBlockLen);
  const std::string stream = first + Pattern(kBlockLen, 1) + EncodeFrame(Ping{kNonce});
  FrameDecoder decoder(DecodeContext{kBlockLen});
  CHECK(decoder.Feed(AsSpan(stream)) == first.size());
  REQUIRE(decoder.state() == State::kHeaderReady);
  CHECK(decoder.payload_len() == kBlockLen);
  CHECK(decoder.WritableSpan().empty());
  CHECK(decoder.Feed(AsSpan(stream)) == 0);  // nothing moves until a destination is chosen

  decoder.DiscardPayload();
  CHECK(decoder.Feed(AsSpan(stream).subspan(first.size())) == kBlockLen);
  REQUIRE(decoder.state() == State::kFrameReady);
  CHECK(decoder.payload().empty());
  decoder.NextFrame();
  CHECK(decoder.Feed(AsSpan(stream).subspan(first.size() + kBlockLen)) == stream.size() - first.size() - kBlockLen);
  REQUIRE(decoder.state() == State::kFrameReady);
  CHECK(decoder.message() == Message{Ping{kNonce}});
}

TEST_CASE("FrameDecoder: violations fail the decoder and nothing after them is decoded", "[frame_decoder]") {
  const std::string ping_header = EncodeHeader(Ping{kNonce});
  std::string bad;
  SECTION("header is not JSON") { bad = RawFrame("{not json}"); }
  SECTION("header is not an object") { bad = RawFrame("[1,2,3]"); }
  SECTION("header has no type") { bad = RawFrame(R"({"nonce":")" + kNonce + R"("})"); }
  SECTION("type is not a string") { bad = RawFrame(R"({"type":7})"); }
  SECTION("control message with a payload") { bad = RawFrame(ping_header, "abcd"); }
  SECTION("block_data payload one byte short") {
    bad = EncodeFrame(BlockData{"r", 1, {0, 1}}, 2 * kBlockLen - 1) + Pattern(2 * kBlockLen - 1, 0);
  }
  SECTION("bad magic") { bad = "KVP2" + RawFrame(ping_header).substr(4); }
  SECTION("header_len below 2") { bad = RawFrame("{").substr(0, kPrefixLen + 1); }

  const std::string ping = EncodeFrame(Ping{kNonce});
  const std::string stream = ping + bad + ping;
  Receiver receiver;
  receiver.Feed(AsSpan(stream));
  REQUIRE(receiver.decoder_.state() == State::kFailed);
  CHECK(receiver.decoder_.error().code() == Status::Code::kViolation);
  CHECK_FALSE(receiver.decoder_.error().message().empty());
  CHECK(receiver.messages_ == std::vector<Message>{Ping{kNonce}});
  // A failed decoder stays failed.
  CHECK(receiver.decoder_.WritableSpan().empty());
  CHECK(receiver.decoder_.Feed(AsSpan(ping)) == 0);
  CHECK(receiver.decoder_.state() == State::kFailed);
}

TEST_CASE("FrameDecoder: ReceivePayloadInto scatters over uneven spans, empty ones included", "[frame_decoder]") {
  const std::string payload = Pattern(2 * kBlockLen, 9);
  const std::string stream = EncodeFrame(BlockData{"r", 1, {0, 1}}, payload.size()) + payload;
  FrameDecoder decoder(DecodeContext{kBlockLen});
  decoder.Feed(AsSpan(stream));
  REQUIRE(decoder.state() == State::kHeaderReady);
  std::vector<uint8_t> a(1), b(0), c(20), d(11);
  decoder.ReceivePayloadInto({a, b, c, d});
  CHECK(decoder.Feed(AsSpan(stream).subspan(stream.size() - payload.size())) == payload.size());
  REQUIRE(decoder.state() == State::kFrameReady);
  std::string joined;
  for (const auto* part : {&a, &c, &d}) joined.append(part->begin(), part->end());
  CHECK(joined == payload);
}

// A vectored read: WritableSpans names the rest of the current target and
// the ones after it, and one Commit may count bytes across several targets.
TEST_CASE("FrameDecoder: WritableSpans offers the scatter targets and Commit crosses them", "[frame_decoder]") {
  const std::string payload = Pattern(3 * kBlockLen, 5);
  const std::string stream = EncodeFrame(BlockData{"r", 1, {0, 1, 2}}, payload.size()) + payload;
  FrameDecoder decoder(DecodeContext{kBlockLen});
  const size_t head = decoder.Feed(AsSpan(stream));
  REQUIRE(decoder.state() == State::kHeaderReady);
  std::vector<std::span<uint8_t>> spans;
  decoder.WritableSpans(8, &spans);
  CHECK(spans.empty());  // nothing to read until the payload has targets
  std::vector<uint8_t> a(kBlockLen, kUntouched), b(kBlockLen, kUntouched), c(kBlockLen, kUntouched);
  decoder.ReceivePayloadInto({a, b, c});
  size_t at = head + decoder.Feed(AsSpan(stream).subspan(head, 3));  // 3 bytes into a
  decoder.WritableSpans(2, &spans);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].data() == a.data() + 3);
  CHECK(spans[0].size() == kBlockLen - 3);
  CHECK(spans[1].data() == b.data());
  // What one read brought: the rest of a and part of b.
  const size_t n = spans[0].size() + 5;
  std::memcpy(spans[0].data(), stream.data() + at, spans[0].size());
  std::memcpy(spans[1].data(), stream.data() + at + spans[0].size(), 5);
  decoder.Commit(n);
  at += n;
  REQUIRE(decoder.state() == State::kReadingPayload);
  decoder.WritableSpans(8, &spans);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].data() == b.data() + 5);
  CHECK(spans[1].data() == c.data());
  decoder.WritableSpans(1, &spans);
  CHECK(spans.size() == 1);
  CHECK(decoder.Feed(AsSpan(stream).subspan(at)) == stream.size() - at);
  REQUIRE(decoder.state() == State::kFrameReady);
  std::string joined;
  for (const auto* part : {&a, &b, &c}) joined.append(part->begin(), part->end());
  CHECK(joined == payload);
}

TEST_CASE("FrameDecoder: Commit beyond a scatter payload's rest fails, and buffer mode offers one span",
          "[frame_decoder]") {
  const std::string payload = Pattern(2 * kBlockLen, 1);
  const std::string stream = EncodeFrame(BlockData{"r", 1, {0, 1}}, payload.size()) + payload;
  FrameDecoder scatter(DecodeContext{kBlockLen});
  scatter.Feed(AsSpan(stream));
  std::vector<uint8_t> a(kBlockLen), b(kBlockLen);
  scatter.ReceivePayloadInto({a, b});
  scatter.Commit(2 * kBlockLen + 1);
  CHECK(scatter.state() == State::kFailed);

  FrameDecoder buffered(DecodeContext{kBlockLen});
  buffered.Feed(AsSpan(stream));
  buffered.BufferPayload();
  std::vector<std::span<uint8_t>> spans;
  buffered.WritableSpans(8, &spans);
  CHECK(spans.size() == 1);
  buffered.Commit(spans[0].size() + 1);  // more than the one span offered
  CHECK(buffered.state() == State::kFailed);
}

TEST_CASE("FrameDecoder: DiscardRestOfPayload leaves the targets alone from then on", "[frame_decoder]") {
  const size_t len = 200 * 1024;  // more than the discard buffer
  const std::string payload = Pattern(len, 3);
  const std::string stream = EncodeFrame(BlockData{"r", 1, {0}}, len) + payload + EncodeFrame(Ping{kNonce});
  FrameDecoder decoder(DecodeContext{len});
  const size_t head = decoder.Feed(AsSpan(stream));
  REQUIRE(decoder.state() == State::kHeaderReady);
  std::vector<uint8_t> slot(len, kUntouched);
  decoder.ReceivePayloadInto({slot});
  size_t at = head + decoder.Feed(AsSpan(stream).subspan(head, 1000));
  // A read was under way into the slot when the rest was diverted: its
  // bytes (more than one discard chunk) still count.
  const std::span<uint8_t> in_flight = decoder.WritableSpan().first(100 * 1024);
  std::memcpy(in_flight.data(), stream.data() + at, in_flight.size());
  decoder.DiscardRestOfPayload();
  CHECK(decoder.state() == State::kReadingPayload);
  decoder.Commit(in_flight.size());
  at += in_flight.size();
  CHECK(decoder.state() == State::kReadingPayload);
  at += decoder.Feed(AsSpan(stream).subspan(at));
  REQUIRE(decoder.state() == State::kFrameReady);
  const size_t written = 1000 + in_flight.size();
  CHECK(std::memcmp(slot.data(), payload.data(), written) == 0);
  CHECK(std::all_of(slot.begin() + written, slot.end(), [](uint8_t b) { return b == kUntouched; }));
  decoder.NextFrame();
  decoder.Feed(AsSpan(stream).subspan(at));
  REQUIRE(decoder.state() == State::kFrameReady);
  CHECK(decoder.message() == Message{Ping{kNonce}});

  FrameDecoder idle;
  idle.DiscardRestOfPayload();  // not reading a payload
  CHECK(idle.state() == State::kFailed);
}

TEST_CASE("FrameDecoder: ReceivePayloadInto with targets not matching payload_len fails", "[frame_decoder]") {
  const std::string stream = EncodeFrame(BlockData{"r", 1, {0, 1}}, 2 * kBlockLen);
  std::vector<uint8_t> memory(4 * kBlockLen);
  const std::span<uint8_t> all(memory);
  std::vector<std::span<uint8_t>> targets;
  SECTION("one byte short") { targets = {all.first(kBlockLen), all.subspan(kBlockLen, kBlockLen - 1)}; }
  SECTION("one byte over") { targets = {all.first(kBlockLen), all.subspan(kBlockLen, kBlockLen + 1)}; }
  SECTION("no targets") {}
  FrameDecoder decoder(DecodeContext{kBlockLen});
  decoder.Feed(AsSpan(stream));
  REQUIRE(decoder.state() == State::kHeaderReady);
  decoder.ReceivePayloadInto(targets);
  CHECK(decoder.state() == State::kFailed);
  CHECK(decoder.error().code() == Status::Code::kInternal);
  CHECK(decoder.WritableSpan().empty());
}

TEST_CASE("FrameDecoder: calls in the wrong state fail with an internal error", "[frame_decoder]") {
  FrameDecoder decoder;
  decoder.NextFrame();
  CHECK(decoder.state() == State::kFailed);
  CHECK(decoder.error().code() == Status::Code::kInternal);

  FrameDecoder other;
  other.DiscardPayload();
  CHECK(other.state() == State::kFailed);
}

TEST_CASE("FrameDecoder: discarding a 64 MiB payload uses a bounded buffer", "[frame_decoder]") {
  const std::string header_json = R"({"type":"huge"})";
  const auto prefix = EncodePrefix({static_cast<uint32_t>(header_json.size()), kMaxPayloadLen});
  const std::string head = std::string(prefix.begin(), prefix.end()) + header_json;
  FrameDecoder decoder;
  REQUIRE(decoder.Feed(AsSpan(head)) == head.size());
  REQUIRE(decoder.state() == State::kHeaderReady);
  decoder.DiscardPayload();

  const std::string chunk(1024 * 1024, 'x');
  size_t largest_room = 0;
  for (uint64_t sent = 0; sent < kMaxPayloadLen; sent += chunk.size()) {
    largest_room = std::max(largest_room, decoder.WritableSpan().size());
    REQUIRE(decoder.Feed(AsSpan(chunk)) == chunk.size());
  }
  CHECK(largest_room <= 64 * 1024);
  REQUIRE(decoder.state() == State::kFrameReady);
  CHECK(decoder.message() == Message{Unknown{"huge"}});
  CHECK(decoder.payload().empty());

  decoder.NextFrame();
  decoder.Feed(AsSpan(EncodeFrame(Ping{kNonce})));
  CHECK(decoder.state() == State::kFrameReady);
}

TEST_CASE("FrameDecoder: a large announced header is not allocated before it arrives", "[frame_decoder]") {
  const auto prefix = EncodePrefix({kMaxHeaderLen, 0});
  const std::string head = std::string(prefix.begin(), prefix.end()) + R"({"t)";
  FrameDecoder decoder;
  CHECK(decoder.Feed(AsSpan(head)) == head.size());
  CHECK(decoder.state() == State::kReadingHeader);
  const size_t room = decoder.WritableSpan().size();
  CHECK(room > 0);
  CHECK(room <= 64 * 1024);
}

// Wire spec 1.1 section 2: the limits before ready are enforced on the
// prefix, before the decoder offers room for a single header byte.
TEST_CASE("FrameDecoder: SetMaxLengths refuses a longer header from the 16-byte prefix", "[frame_decoder]") {
  FrameDecoder decoder;
  decoder.SetMaxLengths(kMaxHeaderLenBeforeReady, kMaxPayloadLenBeforeReady);
  const auto prefix = EncodePrefix({kMaxHeaderLen, 0});
  CHECK(decoder.Feed(AsSpan(std::string(prefix.begin(), prefix.end()) + "{")) == kPrefixLen);
  REQUIRE(decoder.state() == State::kFailed);
  CHECK(decoder.WritableSpan().empty());
  CHECK(decoder.error().message() == "header_len: must be at most 65536 before the connection is ready, got 16777216");
}

TEST_CASE("FrameDecoder: SetMaxLengths admits a header of exactly the limit", "[frame_decoder]") {
  FrameDecoder decoder;
  decoder.SetMaxLengths(kMaxHeaderLenBeforeReady, 0);
  std::string header = R"({"type":"ping","nonce":")" + kNonce + R"(","pad":")";
  header += std::string(kMaxHeaderLenBeforeReady - header.size() - 2, 'x') + "\"}";
  REQUIRE(header.size() == kMaxHeaderLenBeforeReady);
  decoder.Feed(AsSpan(RawFrame(header)));
  CHECK(decoder.state() == State::kFrameReady);
  decoder.NextFrame();
  decoder.Feed(AsSpan(RawFrame(header + " ")));  // one byte over
  CHECK(decoder.state() == State::kFailed);
  CHECK(decoder.error().message().starts_with("header_len: must be at most 65536"));
}

TEST_CASE("FrameDecoder: SetMaxLengths refuses any payload before ready, unknown types included", "[frame_decoder]") {
  FrameDecoder decoder(DecodeContext{kBlockLen});
  decoder.SetMaxLengths(kMaxHeaderLenBeforeReady, kMaxPayloadLenBeforeReady);
  decoder.Feed(AsSpan(RawFrame(R"({"type":"from_the_future"})", "x")));
  REQUIRE(decoder.state() == State::kFailed);
  CHECK(decoder.error().message() == "payload_len: must be at most 0 before the connection is ready, got 1");
}

TEST_CASE("FrameDecoder: raised limits apply from the next frame", "[frame_decoder]") {
  FrameDecoder decoder(DecodeContext{kBlockLen});
  decoder.SetMaxLengths(kMaxHeaderLenBeforeReady, 0);
  decoder.Feed(AsSpan(EncodeFrame(Ping{kNonce})));
  REQUIRE(decoder.state() == State::kFrameReady);
  decoder.NextFrame();
  decoder.SetMaxLengths(kMaxHeaderLen, kMaxPayloadLen);
  const std::string payload = Pattern(kBlockLen, 1);
  decoder.Feed(AsSpan(EncodeFrame(BlockData{"r", 1, {0}}, payload.size()) + payload));
  CHECK(decoder.state() == State::kHeaderReady);
}

}  // namespace kvpeer::protocol
