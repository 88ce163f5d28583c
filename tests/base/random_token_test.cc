#include "base/random_token.h"

#include <catch2/catch.hpp>
#include <deque>
#include <optional>
#include <string>

namespace kvpeer {
namespace {

// Hands out the scripted tokens in order, then reports failure.
TokenSource Scripted(std::deque<std::optional<std::string>> tokens) {
  return [tokens]() mutable -> std::optional<std::string> {
    if (tokens.empty()) return std::nullopt;
    std::optional<std::string> next = std::move(tokens.front());
    tokens.pop_front();
    return next;
  };
}

TEST_CASE("CsprngToken gives fresh 32-digit lowercase hex tokens", "[random_token]") {
  const std::optional<std::string> first = CsprngToken();
  const std::optional<std::string> second = CsprngToken();
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(first->size() == 2 * kTokenBytes);
  CHECK(first->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*first != *second);
}

TEST_CASE("NonZeroToken skips all-zero tokens", "[random_token]") {
  const std::string zero(2 * kTokenBytes, '0');
  const std::string some = "000000000000000000000000000000a1";
  CHECK(NonZeroToken(Scripted({zero, zero, some})) == some);
}

TEST_CASE("a failing source is reported, never replaced by a fixed token", "[random_token]") {
  CHECK_FALSE(NonZeroToken(Scripted({})).has_value());
  const std::string zero(2 * kTokenBytes, '0');
  CHECK_FALSE(NonZeroToken(Scripted({zero, std::nullopt, "1"})).has_value());
}

}  // namespace
}  // namespace kvpeer
