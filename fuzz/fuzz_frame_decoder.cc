// libFuzzer target: frame decoding and message validation.
//
// Input: byte 0 picks how the rest is split into chunks (so partial prefixes,
// headers and payloads are exercised along with the parser); the rest is a
// stream of frames. Properties checked, each a __builtin_trap() on failure:
//   * a decoded message re-encodes (EncodeHeader) to a header that decodes
//     (DecodeHeader) to an equal message (a malformed block_data.xxh3, which
//     is not encoded, to one without it);
//   * a buffered or scattered payload holds exactly the stream's payload bytes;
//   * the decoder only ever fails with a protocol violation (an internal
//     error would mean the decoder or this driver broke an invariant).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fuzz/chunk_sizes.h"
#include "protocol/codec.h"
#include "protocol/frame_decoder.h"

namespace {

using kvpeer::Status;
using kvpeer::protocol::DecodeContext;
using kvpeer::protocol::FrameDecoder;
using kvpeer::protocol::Message;
using State = FrameDecoder::State;

constexpr uint64_t kBlockLen = 16;
// Payloads up to this size may be scattered into a local buffer; larger
// ones cannot arrive in a fuzz input anyway and are discarded or buffered.
constexpr size_t kMaxScatter = 4096;

void Check(bool property) {
  if (!property) __builtin_trap();
}

using kvpeer::fuzz::ChunkSizes;

enum class Sink { kNone, kBuffer, kDiscard, kScatter };

struct Driver {
  std::span<const uint8_t> stream;
  size_t consumed = 0;
  FrameDecoder decoder{DecodeContext{kBlockLen}};
  size_t frames = 0;
  Sink sink = Sink::kNone;
  std::vector<uint8_t> scatter;
};

void ChoosePayloadSink(Driver& d) {
  const uint64_t len = d.decoder.payload_len();
  switch (d.frames % 3) {
    case 0:
      d.sink = Sink::kBuffer;
      return d.decoder.BufferPayload();
    case 1:
      d.sink = len <= kMaxScatter ? Sink::kScatter : Sink::kDiscard;
      break;
    default:
      d.sink = Sink::kDiscard;
  }
  if (d.sink == Sink::kDiscard) return d.decoder.DiscardPayload();
  d.scatter.assign(len, 0);
  const std::span<uint8_t> all(d.scatter);
  const size_t half = len / 2;
  d.decoder.ReceivePayloadInto({all.first(half), all.subspan(half)});
}

// What encoding `message` and decoding it again must give: the message
// itself, except that a malformed block_data.xxh3 (recorded so the session
// can refuse it while the feature is on, wire 1.1 section 7) is not encoded
// and so comes back absent.
Message RoundTripped(const Message& message) {
  Message expected = message;
  if (auto* data = std::get_if<kvpeer::protocol::BlockData>(&expected); data != nullptr && !data->xxh3.valid()) {
    data->xxh3 = {};
  }
  return expected;
}

void CheckFrame(Driver& d) {
  const Message& message = d.decoder.message();
  Message again;
  const DecodeContext context{kBlockLen};
  const Status status =
      kvpeer::protocol::DecodeHeader(kvpeer::protocol::EncodeHeader(message), d.decoder.payload_len(), context, &again);
  Check(status.ok() && again == RoundTripped(message));

  // Feed stops right after a frame's last byte, so the payload is the tail
  // of what was consumed.
  const uint64_t len = d.decoder.payload_len();
  const std::span<const uint8_t> expected = d.stream.subspan(d.consumed - len, len);
  if (d.sink == Sink::kBuffer) Check(std::ranges::equal(d.decoder.payload(), expected));
  if (d.sink == Sink::kScatter) Check(std::ranges::equal(d.scatter, expected));
  if (d.sink != Sink::kBuffer) Check(d.decoder.payload().empty());
}

// Reacts to the state Feed stopped in. Returns false once the decoder failed.
bool Act(Driver& d) {
  switch (d.decoder.state()) {
    case State::kFailed:
      Check(d.decoder.error().code() == Status::Code::kViolation);
      return false;
    case State::kHeaderReady:
      ChoosePayloadSink(d);
      return true;
    case State::kFrameReady:
      CheckFrame(d);
      ++d.frames;
      d.sink = Sink::kNone;
      d.decoder.NextFrame();
      return true;
    default:
      return true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ChunkSizes chunks(data[0]);
  Driver d;
  d.stream = std::span<const uint8_t>(data + 1, size - 1);
  while (d.consumed < d.stream.size()) {
    const size_t end = d.consumed + std::min(chunks.Next(), d.stream.size() - d.consumed);
    while (d.consumed < end) {
      d.consumed += d.decoder.Feed(d.stream.subspan(d.consumed, end - d.consumed));
      if (!Act(d)) return 0;
    }
  }
  return 0;
}
