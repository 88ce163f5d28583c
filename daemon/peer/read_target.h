// ReadTarget: where a PeerConnection's next socket read puts its bytes,
// chosen from what the frame decoder waits for and what the stream is
// (PeerReader, daemon/peer/peer_reader.h). One value instead of a set of
// booleans that had to agree: the read in flight has exactly one target.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvpeer::daemon {

enum class ReadTarget : uint8_t {
  kNone,       // no read in flight
  kDecoder,    // exactly where the decoder wants its next bytes: a prefix, a header, or a payload being dropped (TLS)
  kSlot,       // plain TCP payload: straight into the frame's destination slots, several per read (or the drop buffer)
  kStaging,    // TLS payload: decrypted into the staging buffer, copied into its slot a whole piece at a time
  kReadAhead,  // plain TCP between payloads: the next frames' prefixes and headers in one read
};

// What the choice depends on.
struct ReadSituation {
  bool reading_payload = false;         // the decoder waits for payload bytes
  bool zero_copy = false;               // plain TCP (PeerStream::zero_copy)
  bool discarding_payload = false;      // the payload being read is dropped
  bool last_frame_had_payload = false;  // the frame just decoded carried payload
};

// Plain TCP: a payload is read exactly into its slot (no user-space copy);
// between payloads one read takes what the socket holds, except right after
// a payload, when in a stream of data frames (bulk) the next payload should
// again come straight from the socket, so the read is exact. TLS: a payload
// kept goes through the staging buffer (never into a mapping a truncation
// could pull away); everything else is read exactly.
ReadTarget ChooseReadTarget(const ReadSituation& situation);

std::string_view ReadTargetName(ReadTarget target);

}  // namespace kvpeer::daemon
