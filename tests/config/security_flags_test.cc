// The control-socket access flags (--allow-uid, --allow-gid, --socket-group)
// and the limit flags (--max-peers, --max-engines, --max-rounds-per-peer,
// --max-pending-lookups, --max-queued-bytes) and the TLS files (--tls-cert,
// --tls-key, --tls-ca): defaults, parsing, names, ranges, the config file
// and the effective config.
#include <boost/json/serialize.hpp>
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

Settings MustParse(const std::vector<std::string>& args) {
  ParseResult result = Parse(args);
  INFO(result.message);
  REQUIRE(result.settings.has_value());
  return *result.settings;
}

std::string MustFail(const std::vector<std::string>& args) {
  ParseResult result = Parse(args);
  REQUIRE_FALSE(result.settings.has_value());
  CHECK(result.exit_code == 2);
  return result.message;
}

TEST_CASE("limit and access defaults") {
  Settings s = MustParse({});
  CHECK(s.max_peers == 64);
  CHECK(s.max_engines == 64);
  CHECK(s.max_rounds_per_peer == 4096);
  CHECK(s.max_pending_lookups == 65536);
  CHECK(s.max_queued_bytes == 64ull * 1024 * 1024);
  CHECK(s.allow_uids.empty());
  CHECK(s.allow_gids.empty());
  CHECK_FALSE(s.socket_group.has_value());
  boost::json::object config = EffectiveConfigJson(s);
  CHECK(config.at("max-peers") == 64);
  CHECK(config.at("max-queued-bytes") == 67108864);
  CHECK(config.at("allow-uid").as_array().empty());
  CHECK(config.at("socket-group").is_null());
}

TEST_CASE("limit flags parse into their fields and are reported") {
  Settings s = MustParse({"--max-peers", "2", "--max-engines", "3", "--max-rounds-per-peer", "4",
                          "--max-pending-lookups", "5", "--max-queued-bytes", "65536"});
  CHECK(s.max_peers == 2);
  CHECK(s.max_engines == 3);
  CHECK(s.max_rounds_per_peer == 4);
  CHECK(s.max_pending_lookups == 5);
  CHECK(s.max_queued_bytes == 65536);
  boost::json::object config = EffectiveConfigJson(s);
  CHECK(config.at("max-rounds-per-peer") == 4);
  CHECK(config.at("max-pending-lookups") == 5);
}

TEST_CASE("limit flags out of range name the key, the value and the range") {
  CHECK(Contains(MustFail({"--max-peers", "0"}), "max-peers: 0 is out of range (allowed: 1..65536)"));
  CHECK(Contains(MustFail({"--max-engines", "x"}), "max-engines: 'x' is not a whole number (allowed: 1..65536)"));
  CHECK(Contains(MustFail({"--max-rounds-per-peer", "-1"}), "max-rounds-per-peer: -1 is out of range"));
  CHECK(Contains(MustFail({"--max-pending-lookups", "16777217"}), "allowed: 1..16777216"));
  CHECK(Contains(MustFail({"--max-queued-bytes", "1024"}),
                 "max-queued-bytes: 1024 is out of range (allowed: 65536..1099511627776)"));
}

TEST_CASE("allow-uid and allow-gid take numbers and names, repeatable or comma-separated") {
  Settings s = MustParse({"--allow-uid", "1000", "--allow-uid", "root,1001", "--allow-gid", "0", "--allow-gid",
                          "root"});
  CHECK(s.allow_uids == std::vector<uint32_t>{1000, 0, 1001});
  CHECK(s.allow_gids == std::vector<uint32_t>{0, 0});
  CHECK(boost::json::serialize(EffectiveConfigJson(s).at("allow-uid")) == "[1000,0,1001]");
}

TEST_CASE("socket-group takes a gid or a group name") {
  CHECK(MustParse({"--socket-group", "1234"}).socket_group == 1234u);
  CHECK(MustParse({"--socket-group", "root"}).socket_group == 0u);
  CHECK(EffectiveConfigJson(MustParse({"--socket-group", "77"})).at("socket-group") == 77);
}

TEST_CASE("unknown names and out-of-range ids are refused, naming the key") {
  CHECK(Contains(MustFail({"--allow-uid", "no-such-user-kvpeer"}),
                 "allow-uid: 'no-such-user-kvpeer' is neither a number nor a known user name"));
  CHECK(Contains(MustFail({"--allow-gid", "no-such-group-kvpeer"}),
                 "allow-gid: 'no-such-group-kvpeer' is neither a number nor a known group name"));
  CHECK(Contains(MustFail({"--socket-group", "4294967295"}), "socket-group: 4294967295 is out of range"));
  CHECK(Contains(MustFail({"--allow-uid", "-5"}), "allow-uid: '-5' is neither a number nor a known user name"));
}

TEST_CASE("the config file sets access and limits; a flag replaces the file's list") {
  TempDir dir;
  std::string file = dir.Write("k.toml",
                               "allow-uid = [1000, 1001]\n"
                               "allow-gid = [\"root\"]\n"
                               "socket-group = 5\n"
                               "max-peers = 7\n"
                               "max-queued-bytes = 131072\n");
  Settings s = MustParse({"--config", file});
  CHECK(s.allow_uids == std::vector<uint32_t>{1000, 1001});
  CHECK(s.allow_gids == std::vector<uint32_t>{0});
  CHECK(s.socket_group == 5u);
  CHECK(s.max_peers == 7);
  CHECK(s.max_queued_bytes == 131072);
  CHECK(MustParse({"--config", file, "--allow-uid", "3"}).allow_uids == std::vector<uint32_t>{3});
}

TEST_CASE("tls-cert, tls-key and tls-ca go together") {
  TempDir dir;
  const std::string cert = dir.Write("node.crt", "cert", 0644);
  const std::string key = dir.Write("node.key", "key", 0600);
  const std::string ca = dir.Write("ca.crt", "ca", 0644);
  Settings s = MustParse({"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca});
  CHECK(s.tls_cert == cert);
  CHECK(s.tls_key == key);
  CHECK(s.tls_ca == ca);
  boost::json::object config = EffectiveConfigJson(s);
  CHECK(config.at("tls-ca").as_string() == ca);
  CHECK(EffectiveConfigJson(MustParse({})).at("tls-cert").is_null());

  CHECK(Contains(MustFail({"--tls-cert", cert}), "tls-cert, tls-key, tls-ca: give all three or none (missing: "
                                                 "tls-key tls-ca)"));
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", key}), "(missing: tls-ca)"));
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", key, "--tls-ca", dir.path() + "/nope"}),
                 "tls-ca: cannot read '" + dir.path() + "/nope': No such file or directory"));
  const std::string open_key = dir.Write("open.key", "key", 0640);
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", open_key, "--tls-ca", ca}),
                 "tls-key: '" + open_key + "' is readable by group or others (mode 0640)"));
  CHECK(Contains(MustFail({"--tls-cert", dir.path(), "--tls-key", key, "--tls-ca", ca}), "is not a regular file"));
  CHECK(Contains(MustFail({"--tls-ca", ""}), "tls-ca: '' is empty"));
}

}  // namespace
}  // namespace kvpeer::config
