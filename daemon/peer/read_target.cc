#include "daemon/peer/read_target.h"

namespace kvpeer::daemon {

ReadTarget ChooseReadTarget(const ReadSituation& situation) {
  if (situation.reading_payload) {
    if (situation.zero_copy) return ReadTarget::kSlot;
    return situation.discarding_payload ? ReadTarget::kDecoder : ReadTarget::kStaging;
  }
  if (situation.zero_copy && !situation.last_frame_had_payload) return ReadTarget::kReadAhead;
  return ReadTarget::kDecoder;
}

std::string_view ReadTargetName(ReadTarget target) {
  switch (target) {
    case ReadTarget::kNone:
      return "none";
    case ReadTarget::kDecoder:
      return "decoder";
    case ReadTarget::kSlot:
      return "slot";
    case ReadTarget::kStaging:
      return "staging";
    case ReadTarget::kReadAhead:
      return "read_ahead";
  }
  return "unknown";
}

}  // namespace kvpeer::daemon
