// The reload half of the option table: which options are live, what
// DiffSettings reports between two parses, what ApplyLiveSettings copies,
// and --metrics-listen.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "config/settings.h"
#include "test_files.h"

namespace kvpeer::config {
namespace {

using testing::Parse;
using testing::TempDir;

Settings MustParse(std::vector<std::string> args) {
  ParseResult result = Parse(std::move(args));
  INFO(result.message);
  REQUIRE(result.settings.has_value());
  return *result.settings;
}

const SettingChange* Find(const std::vector<SettingChange>& changes, const std::string& name) {
  auto it = std::find_if(changes.begin(), changes.end(), [&](const SettingChange& c) { return c.name == name; });
  return it == changes.end() ? nullptr : &*it;
}

TEST_CASE("exactly log-level, allow-cidr, psk-file and idle-peer-timeout-s are live, each row copying itself") {
  std::set<std::string> live;
  for (const OptionSpec& option : Options()) {
    INFO(option.name);
    // A reloadable row says where its value is, or copies it itself.
    if (option.reloadable) CHECK((option.copy != nullptr || option.field.index() != 0));
    if (option.reloadable) live.emplace(option.name);
  }
  CHECK(live == std::set<std::string>{"log-level", "allow-cidr", "psk-file", "idle-peer-timeout-s"});
}

TEST_CASE("DiffSettings names each changed option with its old and new value, live or not") {
  TempDir dir;
  const std::string before_file = dir.Write("a.toml", "log-level = \"info\"\nlisten = \"127.0.0.1:5710\"\n");
  const std::string after_file = dir.Write(
      "b.toml", "log-level = \"debug\"\nlisten = \"127.0.0.1:5711\"\nallow-cidr = [\"10.0.0.0/8\", \"fd00::/8\"]\n");
  Settings before = MustParse({"--config", before_file});
  Settings after = MustParse({"--config", after_file});

  std::vector<SettingChange> changes = DiffSettings(before, after);
  const SettingChange* level = Find(changes, "log-level");
  REQUIRE(level != nullptr);
  CHECK(level->old_value == "info");
  CHECK(level->new_value == "debug");
  CHECK(level->live);
  const SettingChange* cidr = Find(changes, "allow-cidr");
  REQUIRE(cidr != nullptr);
  CHECK(cidr->old_value == "[]");
  CHECK(cidr->new_value == R"(["10.0.0.0/8","fd00::/8"])");
  CHECK(cidr->live);
  const SettingChange* listen = Find(changes, "listen");
  REQUIRE(listen != nullptr);
  CHECK_FALSE(listen->live);
  // The node id follows the listen address; only listen is reported.
  CHECK(Find(changes, "node-id") == nullptr);
  // "config" is the command line's, never the file's.
  CHECK(Find(changes, "config") == nullptr);
  CHECK(changes.size() == 3);
  CHECK(DiffSettings(after, after).empty());
}

TEST_CASE("DiffSettings reports a new key in the same psk-file without showing it") {
  TempDir dir;
  const std::string psk = dir.Write("psk", std::string(32, 'a'));
  Settings before = MustParse({"--psk-file", psk});
  dir.Write("psk", std::string(40, 'b'));
  Settings after = MustParse({"--psk-file", psk});
  std::vector<SettingChange> changes = DiffSettings(before, after);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].name == "psk-file");
  CHECK(changes[0].live);
  CHECK(changes[0].old_value == psk);
  CHECK(changes[0].new_value == psk + " (key changed)");
  CHECK(changes[0].new_value.find("bbbb") == std::string::npos);
}

TEST_CASE("ApplyLiveSettings copies the live options and nothing else") {
  TempDir dir;
  const std::string psk = dir.Write("psk", std::string(32, 'k'));
  Settings running = MustParse({"--listen", "127.0.0.1:5710"});
  Settings reloaded = MustParse({"--listen", "127.0.0.1:5799", "--log-level", "warn", "--allow-cidr", "10.1.0.0/16",
                                 "--psk-file", psk, "--load-timeout-s", "7"});
  ApplyLiveSettings(reloaded, &running);
  CHECK(running.log_level == "warn");
  REQUIRE(running.allow_cidrs.size() == 1);
  CHECK(running.allow_cidrs[0].ToString() == "10.1.0.0/16");
  CHECK(running.psk_file == psk);
  CHECK(running.psk == std::string(32, 'k'));
  CHECK(running.listen.port == 5710);
  CHECK(running.load_timeout == std::chrono::seconds(30));
  // What is left differs only in options that need a restart.
  for (const SettingChange& change : DiffSettings(running, reloaded)) {
    INFO(change.name);
    CHECK_FALSE(change.live);
  }
}

TEST_CASE("metrics-listen takes HOST:PORT, is unset by default and shows in the effective config") {
  CHECK_FALSE(MustParse({}).metrics_listen.has_value());
  CHECK(EffectiveConfigJson(MustParse({})).at("metrics-listen").is_null());
  Settings set = MustParse({"--metrics-listen", "[::1]:9464"});
  REQUIRE(set.metrics_listen.has_value());
  CHECK(set.metrics_listen->host == "::1");
  CHECK(set.metrics_listen->port == 9464);
  CHECK(EffectiveConfigJson(set).at("metrics-listen") == "[::1]:9464");

  ParseResult bad = Parse({"--metrics-listen", "localhost"});
  CHECK_FALSE(bad.settings.has_value());
  CHECK(bad.exit_code == 2);
  CHECK(testing::Contains(bad.message, "metrics-listen: 'localhost' is not HOST:PORT"));
}

}  // namespace
}  // namespace kvpeer::config
