// One answer line of the control API and its decoders: each checks `ok`
// (a failure becomes its Error) and the fields the op promises
// (kBadAnswer when they are not there).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvpeer/result.h"
#include "kvpeer/types.h"

namespace kvpeer {

namespace internal {
struct ParsedAnswer;
}

class Answer {
 public:
  // Parses one line; kBadAnswer if it is not a JSON object.
  static Result<Answer> Parse(std::string line);

  const std::string& text() const { return text_; }
  // Ok, or the daemon's error (its code and message).
  Result<void> Status() const;
  const internal::ParsedAnswer& parsed() const { return *parsed_; }

 private:
  Answer(std::string text, std::shared_ptr<const internal::ParsedAnswer> parsed)
      : text_(std::move(text)), parsed_(std::move(parsed)) {}
  std::string text_;
  std::shared_ptr<const internal::ParsedAnswer> parsed_;
};

namespace answer {

Result<HelloInfo> Hello(const Answer& answer);
Result<RegionInfo> RegisterRegion(const Answer& answer);
Result<uint64_t> Publish(const Answer& answer);  // the count published
Result<UnpublishResult> Unpublish(const Answer& answer);
Result<std::vector<Probe>> Lookup(const Answer& answer);
Result<uint64_t> Flush(const Answer& answer);  // lookup messages sent
Result<PollReport> Poll(const Answer& answer);
// The ops whose success has no fields: load, store, finish, connect,
// disconnect.
Result<void> Done(const Answer& answer);

}  // namespace answer
}  // namespace kvpeer
