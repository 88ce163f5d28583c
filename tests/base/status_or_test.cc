#include "base/status_or.h"

#include <memory>
#include <string>

#include <catch2/catch.hpp>

namespace kvpeer {
namespace {

StatusOr<int> Half(int n) {
  if (n % 2 != 0) return Status::Invalid(std::to_string(n) + " is odd");
  return n / 2;
}

TEST_CASE("a StatusOr holds the value or the failure that explains its absence") {
  StatusOr<int> half = Half(8);
  REQUIRE(half.ok());
  CHECK(half.status().ok());
  CHECK(*half == 4);

  StatusOr<int> odd = Half(7);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().code() == Status::Code::kInvalid);
  CHECK(odd.status().message() == "7 is odd");
}

TEST_CASE("a StatusOr hands over a move-only value") {
  StatusOr<std::unique_ptr<std::string>> text = std::make_unique<std::string>("kept");
  REQUIRE(text.ok());
  CHECK(**text == "kept");
  std::unique_ptr<std::string> taken = std::move(text).value();
  CHECK(*taken == "kept");
}

#ifdef NDEBUG
// Debug builds assert instead; a release build must not report "ok" with no
// value behind it.
TEST_CASE("a StatusOr built from an ok Status is an internal failure, not an empty ok") {
  StatusOr<int> wrong{Status::Ok()};
  CHECK_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Status::Code::kInternal);
}
#endif

}  // namespace
}  // namespace kvpeer
