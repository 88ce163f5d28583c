// The control-socket access flags (--allow-uid, --allow-gid, --socket-group)
// and the limit flags (--max-peers, --max-engines, --max-rounds-per-peer,
// --max-pending-lookups, --max-queued-bytes) and the TLS files (--tls-cert,
// --tls-key, --tls-ca): defaults, parsing, names, ranges, the config file
// and the effective config.
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "config/checked_file.h"
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
  Settings s =
      MustParse({"--allow-uid", "1000", "--allow-uid", "root,1001", "--allow-gid", "0", "--allow-gid", "root"});
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

TEST_CASE("publisher and operator ids: empty by default, numbers and names, flags and TOML lists") {
  Settings defaults = MustParse({});
  CHECK(defaults.publisher_uids.empty());
  CHECK(defaults.publisher_gids.empty());
  CHECK(defaults.operator_uids.empty());
  CHECK(defaults.operator_gids.empty());
  CHECK(boost::json::serialize(EffectiveConfigJson(defaults).at("publisher-gid")) == "[]");
  Settings s = MustParse({"--publisher-uid", "1000,root", "--publisher-gid", "47", "--operator-uid", "7",
                          "--operator-gid", "root", "--operator-gid", "8"});
  CHECK(s.publisher_uids == std::vector<uint32_t>{1000, 0});
  CHECK(s.publisher_gids == std::vector<uint32_t>{47});
  CHECK(s.operator_uids == std::vector<uint32_t>{7});
  CHECK(s.operator_gids == std::vector<uint32_t>{0, 8});
  TempDir dir;
  std::string file = dir.Write("p.toml", "publisher-gid = [\"root\", 12]\noperator-uid = [3]\n");
  Settings from_file = MustParse({"--config", file});
  CHECK(from_file.publisher_gids == std::vector<uint32_t>{0, 12});
  CHECK(from_file.operator_uids == std::vector<uint32_t>{3});
  CHECK(Contains(MustFail({"--publisher-gid", "no-such-group-kvpeer"}),
                 "publisher-gid: 'no-such-group-kvpeer' is neither a number nor a known group name"));
  CHECK(Contains(MustFail({"--operator-uid", "4294967295"}), "operator-uid: 4294967295 is out of range"));
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

  CHECK(Contains(MustFail({"--tls-cert", cert}),
                 "tls-cert, tls-key, tls-ca: give all three or none (missing: "
                 "tls-key tls-ca)"));
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", key}), "(missing: tls-ca)"));
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", key, "--tls-ca", dir.path() + "/nope"}),
                 "tls-ca: '" + dir.path() + "/nope' cannot be opened: No such file or directory"));
  const std::string open_key = dir.Write("open.key", "key", 0640);
  CHECK(Contains(MustFail({"--tls-cert", cert, "--tls-key", open_key, "--tls-ca", ca}),
                 "tls-key: '" + open_key + "' grants permissions to group or others (mode 0640)"));
  CHECK(Contains(MustFail({"--tls-cert", dir.path(), "--tls-key", key, "--tls-ca", ca}), "is not a regular file"));
  CHECK(Contains(MustFail({"--tls-ca", ""}), "tls-ca: '' is empty"));
}

// docs/security.md, "TLS identity: a certificate speaks for one node" (its
// "File permissions" item): the key like the PSK (nothing for
// group or others), the certificate and CA bundle writable by the owner only.
TEST_CASE("a tls-key granting group or others any permission is refused, naming the file and mode") {
  TempDir dir;
  const std::string cert = dir.Write("node.crt", "cert", 0644);
  const std::string ca = dir.Write("ca.crt", "ca", 0644);
  for (mode_t mode : {0400, 0600}) {
    MustParse({"--tls-cert", cert, "--tls-key", dir.Write("ok.key", "key", mode), "--tls-ca", ca});
  }
  for (mode_t mode : {0640, 0604, 0620, 0602, 0610, 0601, 0660, 0666}) {
    const std::string key = dir.Write("loose.key", "key", mode);
    const std::string message = MustFail({"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca});
    INFO(message);
    CHECK(Contains(message, "kvpeerd: tls-key: '" + key + "' grants permissions to group or others (mode " +
                                OctalMode(mode) + "); allowed: owner-only, e.g. chmod 600"));
  }
}

TEST_CASE("a tls-cert or tls-ca writable by group or others is refused, naming the file and mode") {
  TempDir dir;
  const std::string key = dir.Write("node.key", "key", 0600);
  for (mode_t mode : {0644, 0444, 0640, 0600, 0755}) {
    const std::string cert = dir.Write("ok.crt", "cert", mode);
    const std::string ca = dir.Write("ok-ca.crt", "ca", mode);
    MustParse({"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca});
  }
  const std::string good = dir.Write("good.crt", "cert", 0644);
  for (mode_t mode : {0664, 0646, 0666, 0624, 0602, 0775}) {
    const std::string loose = dir.Write("loose.crt", "pem", mode);
    const std::string writable = "' is writable by group or others (mode " + OctalMode(mode) +
                                 "); allowed: writable by the owner only, e.g. chmod 644";
    const std::string as_ca = MustFail({"--tls-cert", good, "--tls-key", key, "--tls-ca", loose});
    INFO(as_ca);
    CHECK(Contains(as_ca, "kvpeerd: tls-ca: '" + loose + writable));
    const std::string as_cert = MustFail({"--tls-cert", loose, "--tls-key", key, "--tls-ca", good});
    INFO(as_cert);
    CHECK(Contains(as_cert, "kvpeerd: tls-cert: '" + loose + writable));
  }
}

}  // namespace
}  // namespace kvpeer::config
