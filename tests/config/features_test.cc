// The features setting (control-api.md section 5, --features): the wire
// features a node offers in its connect (wire-protocol.md section 7).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "config/settings.h"
#include "test_files.h"

namespace kvpeer::config {
namespace {

using testing::Contains;
using testing::Parse;
using testing::TempDir;

using Names = std::vector<std::string>;

Names FeaturesOf(const std::vector<std::string>& args) {
  ParseResult result = Parse(args);
  INFO(result.message);
  REQUIRE(result.settings.has_value());
  return result.settings->features;
}

TEST_CASE("every supported feature is offered by default") { CHECK(FeaturesOf({}) == Names{"xxh3"}); }

TEST_CASE("an empty --features offers none, in every spelling") { CHECK(FeaturesOf({"--features", ""}).empty()); }

TEST_CASE("the features flag names features, comma-separated or repeated, each once") {
  CHECK(FeaturesOf({"--features", "xxh3"}) == Names{"xxh3"});
  CHECK(FeaturesOf({"--features", "xxh3,xxh3"}) == Names{"xxh3"});
  CHECK(FeaturesOf({"--features", "xxh3", "--features", "xxh3"}) == Names{"xxh3"});
}

TEST_CASE("an unknown feature is refused naming it and the supported ones") {
  ParseResult result = Parse({"--features", "xxh3,crc32"});
  REQUIRE_FALSE(result.settings.has_value());
  CHECK(result.exit_code == 2);
  CHECK(Contains(result.message, "features"));
  CHECK(Contains(result.message, "'crc32' is not a supported feature"));
  CHECK(Contains(result.message, "xxh3"));
}

TEST_CASE("features from the config file: an array, a string, or empty; a flag overrides") {
  TempDir dir;
  CHECK(FeaturesOf({"--config", dir.Write("a.toml", "features = [\"xxh3\"]\n")}) == Names{"xxh3"});
  CHECK(FeaturesOf({"--config", dir.Write("b.toml", "features = []\n")}).empty());
  CHECK(FeaturesOf({"--config", dir.Write("c.toml", "features = \"\"\n")}).empty());
  CHECK(FeaturesOf({"--config", dir.Write("d.toml", "features = \"xxh3\"\n"), "--features", ""}).empty());
  CHECK(FeaturesOf({"--config", dir.Write("e.toml", "features = []\n"), "--features", "xxh3"}) == Names{"xxh3"});
}

TEST_CASE("status shows the features offered") {
  ParseResult result = Parse({"--features", ""});
  REQUIRE(result.settings.has_value());
  CHECK(EffectiveConfigJson(*result.settings).at("features").as_array().empty());
  result = Parse({});
  REQUIRE(result.settings.has_value());
  CHECK(EffectiveConfigJson(*result.settings).at("features").as_array().size() == 1);
}

}  // namespace
}  // namespace kvpeer::config
