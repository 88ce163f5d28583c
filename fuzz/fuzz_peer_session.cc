// libFuzzer target: a live PeerSession driven by random frame sequences.
//
// The fuzzer plays the remote peer and the local daemon at once. The input is
// a setup byte (dialled or accepted, PSK or not, how the handshake goes,
// frame size, liveness timeout, round limit) followed by a stream of operations, each an
// opcode byte and its argument bytes:
//   * inbound frames: lookup, lookup_resp, fetch, block_data headers (with
//     an xxh3 array, valid, mismatching or malformed, once a connect turned
//     the feature on) and their payloads (written piecewise into the plan's
//     targets, then completed), transfer_done, abort_fetch, abort_ack, ping, pong,
//     disconnect, unknown types, connect and connect_ack (valid or with one
//     field wrong), and raw header JSON from the input. Every inbound message
//     passes EncodeHeader + DecodeHeader first, so the session sees exactly
//     what the wire decoder lets through, as in the daemon;
//   * local operations: RegisterLookup, FlushPendingLookups, RequestBlocks,
//     AddSupply, Finish, Close, publishing and unpublishing index keys;
//   * clock jumps with OnTick, ProduceDataFrame pulls (only when the previous
//     data frame is written, the writer's contract) and writes of queued
//     frames (which drop their pins).
// While a block_data payload is being received, no other inbound frame
// arrives (the daemon's reader is inside the payload), but local operations
// and ticks may interleave, as they do in the daemon.
//
// Properties, each a __builtin_trap() on failure:
//   * every result names a job that is owed one, and no job gets two;
//   * once the session is closed (and the daemon dropped its unwritten
//     frames) every job has exactly one result, no pin is alive, no slot sink
//     is held by the session, and the session refuses new work;
//   * a BlockDataPlan targets exactly the requested, not yet received slots
//     of the load of that round (the sink checks every Slot() call), never
//     a load that already has its result, and no payload byte is written
//     into a load's slots after its result was reported;
//   * a load succeeds only with every destination received;
//   * every frame the session sends passes the wire decoder; role frames
//     leave only after the handshake, nothing leaves a closed session;
//     round tokens of fetches are never reused;
//   * as a server, it sends block_data only for an open fetch, each block to
//     a destination that fetch demanded with the key it demanded, never a
//     block of a store job whose result was already reported, at most one
//     transfer_done per fetch (success only when every block went out), an
//     abort_ack exactly for a first abort_fetch of a round; it answers a
//     published key as a hit (all keys miss when the round limit refuses
//     the lookup) and never holds more rounds than its limit;
//   * a store result is never reported while an unwritten frame reads that
//     job's slots;
//   * OnTick before NextDeadline does nothing, and after OnTick the next
//     deadline lies in the future (a timer loop cannot spin);
//   * OnMessage returns non-ok exactly when the session closed, and never
//     kInternal; ProduceDataFrame sends only when HasDataToSend said so.
#include <cstddef>
#include <cstdint>

#include "fuzz/peer_session_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  peer_session_fuzz::Input input(data, size);
  peer_session_fuzz::Harness harness(input);
  harness.Run();
  return 0;
}
