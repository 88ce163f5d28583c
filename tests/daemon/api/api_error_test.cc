#include "daemon/api/api_error.h"

#include <catch2/catch.hpp>

namespace kvpeer::daemon {
namespace {

// docs/control-api.md, "2. Errors": every code the API names, from the
// Status code that carries it.
TEST_CASE("every control API error code comes from one Status code") {
  CHECK(ApiErrorCode(Status::Invalid("x")) == "bad_request");
  CHECK(ApiErrorCode(Status::UnknownOp("x")) == "unknown_op");
  CHECK(ApiErrorCode(Status::Incompatible("x")) == "incompatible");
  CHECK(ApiErrorCode(Status::NoRegion("x")) == "no_region");
  CHECK(ApiErrorCode(Status::OutOfRange("x")) == "out_of_range");
  CHECK(ApiErrorCode(Status::Conflict("x")) == "conflict");
  CHECK(ApiErrorCode(Status::NotFound("x")) == "not_found");
  CHECK(ApiErrorCode(Status::Unavailable("x")) == "peer_unavailable");
  CHECK(ApiErrorCode(Status::TooLarge("x")) == "too_large");
  CHECK(ApiErrorCode(Status::ShuttingDown("x")) == "shutting_down");
  CHECK(ApiErrorCode(Status::Internal("x")) == "internal");
}

TEST_CASE("a peer's protocol violation reaches an engine as peer_unavailable") {
  CHECK(ApiErrorCode(Status::Violation("fetch.keys[0]: must be lowercase hex")) == "peer_unavailable");
}

}  // namespace
}  // namespace kvpeer::daemon
