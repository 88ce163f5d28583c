#include "config/settings.h"

#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "config/version.h"
#include "test_files.h"

namespace kvpeer::config {
namespace {

using testing::Contains;
using testing::Hostname;
using testing::Parse;
using testing::TempDir;

const std::string kGoodKey(40, 'k');

Settings MustParse(const std::vector<std::string>& args) {
  ParseResult result = Parse(args);
  INFO(result.message);
  REQUIRE(result.settings.has_value());
  return *result.settings;
}

// The error text of an invalid command line (exit 2 required).
std::string MustFail(const std::vector<std::string>& args) {
  ParseResult result = Parse(args);
  REQUIRE_FALSE(result.settings.has_value());
  CHECK(result.exit_code == 2);
  return result.message;
}

TEST_CASE("no flags gives every default of control-api section 5") {
  Settings s = MustParse({});
  CHECK(FormatHostPort(s.listen) == "0.0.0.0:5710");
  CHECK(s.node_id == Hostname() + ":5710");
  CHECK(s.node_id_from_listen);
  CHECK(s.socket_path == "/run/kvpeer/kvpeerd.sock");
  CHECK_FALSE(s.block_len.has_value());
  CHECK_FALSE(s.config_fingerprint.has_value());
  CHECK_FALSE(s.hash_seed.has_value());
  CHECK(s.psk_file.empty());
  CHECK(s.psk.empty());
  CHECK(s.allow_cidrs.empty());
  CHECK(s.load_timeout == std::chrono::seconds(30));
  CHECK(s.abort_ack_timeout == std::chrono::seconds(10));
  CHECK(s.handshake_timeout == std::chrono::seconds(10));
  CHECK(s.idle_peer_timeout == std::chrono::seconds(300));
  CHECK(s.log_level == "info");
  CHECK(s.config_file.empty());
}

TEST_CASE("the table's documented defaults are the defaults Settings{} holds") {
  Settings defaults;
  for (const OptionSpec& option : Options()) {
    if (option.default_text.empty()) continue;
    INFO(option.name);
    Settings applied;
    REQUIRE(option.apply({std::string(option.default_text)}, &applied).ok());
    CHECK(option.effective(applied) == option.effective(defaults));
  }
}

TEST_CASE("every flag parses into its field") {
  TempDir dir;
  std::string psk = dir.Write("psk", kGoodKey + "\n");
  Settings s = MustParse({"--listen",
                          "10.1.2.3:6000",
                          "--node-id",
                          "node-a.example:6000",
                          "--socket",
                          "/tmp/k.sock",
                          "--block-len",
                          "4096",
                          "--config-fingerprint",
                          "fp-1",
                          "--hash-seed",
                          "seed-1",
                          "--psk-file",
                          psk,
                          "--allow-cidr",
                          "10.0.0.0/8",
                          "--allow-cidr",
                          "fd00::/8",
                          "--load-timeout-s",
                          "31",
                          "--abort-ack-timeout-s",
                          "11",
                          "--handshake-timeout-s",
                          "12",
                          "--log-level",
                          "debug"});
  CHECK(s.listen.host == "10.1.2.3");
  CHECK(s.listen.port == 6000);
  CHECK(s.node_id == "node-a.example:6000");
  CHECK_FALSE(s.node_id_from_listen);
  CHECK(s.socket_path == "/tmp/k.sock");
  CHECK(s.block_len == 4096u);
  CHECK(s.config_fingerprint == "fp-1");
  CHECK(s.hash_seed == "seed-1");
  CHECK(s.psk_file == psk);
  CHECK(s.psk == kGoodKey);
  REQUIRE(s.allow_cidrs.size() == 2);
  CHECK(s.allow_cidrs[0].ToString() == "10.0.0.0/8");
  CHECK(s.allow_cidrs[1].ToString() == "fd00::/8");
  CHECK(s.load_timeout == std::chrono::seconds(31));
  CHECK(s.abort_ack_timeout == std::chrono::seconds(11));
  CHECK(s.handshake_timeout == std::chrono::seconds(12));
  CHECK(s.log_level == "debug");
}

TEST_CASE("flag=value spelling, comma-separated CIDRs, every log level") {
  Settings s = MustParse({"--listen=127.0.0.1:0", "--allow-cidr=10.0.0.0/8,192.168.0.0/16"});
  CHECK(FormatHostPort(s.listen) == "127.0.0.1:0");
  CHECK(s.allow_cidrs.size() == 2);
  for (std::string level : {"trace", "debug", "info", "warn", "error"}) {
    CHECK(MustParse({"--log-level", level}).log_level == level);
  }
}

TEST_CASE("an empty config-fingerprint is a value, distinct from unset") {
  CHECK(MustParse({"--config-fingerprint", ""}).config_fingerprint == std::string());
}

TEST_CASE("node-id defaults") {
  SECTION("a specific listen host is the node id") {
    CHECK(MustParse({"--listen", "10.1.2.3:6000"}).node_id == "10.1.2.3:6000");
    CHECK(MustParse({"--listen", "[fd00::1]:6000"}).node_id == "[fd00::1]:6000");
  }
  SECTION("a wildcard host becomes the hostname with the listen port") {
    CHECK(MustParse({"--listen", "0.0.0.0:6001"}).node_id == Hostname() + ":6001");
    CHECK(MustParse({"--listen", "[::]:6002"}).node_id == Hostname() + ":6002");
    CHECK(MustParse({"--listen", "[0:0::0]:6003"}).node_id == Hostname() + ":6003");
  }
  SECTION("ResolveNodeId puts the bound port into a derived id only") {
    Settings derived = MustParse({"--listen", "127.0.0.1:0"});
    CHECK(derived.node_id == "127.0.0.1:0");
    CHECK(ResolveNodeId(derived, 41234) == "127.0.0.1:41234");
    Settings wildcard = MustParse({"--listen", "[::]:0"});
    CHECK(ResolveNodeId(wildcard, 7) == Hostname() + ":7");
    Settings explicit_id = MustParse({"--listen", "127.0.0.1:0", "--node-id", "me:1"});
    CHECK(ResolveNodeId(explicit_id, 41234) == "me:1");
  }
  SECTION("an id peers would refuse (wire-protocol.md section 2) is refused at start") {
    const std::string underscore = MustFail({"--node-id", "node_a:5710"});
    CHECK(underscore.find("'node_a:5710' is not a valid peer_id") != std::string::npos);
    CHECK(underscore.find("only letters, digits, '-' and '.'") != std::string::npos);
    CHECK(MustFail({"--node-id", "node-a:05710"}).find("without leading zeros") != std::string::npos);
  }
}

struct BadValue {
  std::vector<std::string> args;
  std::string expected;  // the whole line after "kvpeerd: ", or a distinctive part of it
};

TEST_CASE("each validation error names the key, the value and what is allowed") {
  std::string long_socket = "/" + std::string(120, 's');
  std::vector<BadValue> cases = {
      {{"--listen", "1.2.3.4"}, "listen: '1.2.3.4' is not HOST:PORT (port 0..65535"},
      {{"--listen", "1.2.3.4:65536"}, "listen: '1.2.3.4:65536' is not HOST:PORT"},
      {{"--listen", "::1:5710"}, "listen: '::1:5710' is not HOST:PORT"},
      {{"--listen", ":5710"}, "listen: ':5710' is not HOST:PORT"},
      {{"--node-id", "node:0"}, "node-id: 'node:0' is not HOST:PORT (port 1..65535"},
      {{"--socket", long_socket}, "socket: '" + long_socket + "' is 121 bytes; a Unix socket path is at most 107"},
      {{"--block-len", "0"}, "block-len: 0 must be 1..67108864"},
      {{"--block-len", "67108865"}, "block-len: 67108865 must be 1..67108864"},
      {{"--block-len", "4k"}, "block-len: '4k' is not a number (allowed: 1..67108864)"},
      {{"--block-len", "99999999999999999999999"}, "block-len: 99999999999999999999999 must be 1..67108864"},
      {{"--config-fingerprint", std::string(4097, 'f')}, "config-fingerprint: has 4097 characters; allowed: 0..4096"},
      {{"--hash-seed", ""}, "hash-seed: has 0 characters; allowed: 1..4096"},
      {{"--psk-file", ""}, "psk-file: '' is empty"},
      {{"--allow-cidr", "10.0.0.0/33"}, "allow-cidr: '10.0.0.0/33' is not a CIDR (prefix length must be 0..32"},
      {{"--allow-cidr", "fd00::/129"}, "allow-cidr: 'fd00::/129' is not a CIDR (prefix length must be 0..128"},
      {{"--allow-cidr", "10.0.0.1/8"},
       "allow-cidr: '10.0.0.1/8' is not a CIDR (host bits are set; did you mean 10.0.0.0/8?)"},
      {{"--allow-cidr", "nonsense"}, "allow-cidr: 'nonsense' is not a CIDR"},
      {{"--load-timeout-s", "-1"}, "load-timeout-s: -1 must be > 0"},
      {{"--load-timeout-s=0"}, "load-timeout-s: 0 must be > 0"},
      {{"--load-timeout-s", "1.5"}, "load-timeout-s: '1.5' is not a whole number of seconds (allowed: 1..86400)"},
      {{"--abort-ack-timeout-s", "86401"}, "abort-ack-timeout-s: 86401 must be at most 86400"},
      {{"--handshake-timeout-s", "ten"}, "handshake-timeout-s: 'ten' is not a whole number of seconds"},
      {{"--idle-peer-timeout-s", "-1"}, "idle-peer-timeout-s: -1 must be >= 0 (whole seconds, 0..86400)"},
      {{"--idle-peer-timeout-s", "5m"},
       "idle-peer-timeout-s: '5m' is not a whole number of seconds (allowed: 0..86400)"},
      {{"--idle-peer-timeout-s", "86401"}, "idle-peer-timeout-s: 86401 must be at most 86400"},
      {{"--idle-peer-timeout-s", "99999999999999999999999"},
       "idle-peer-timeout-s: 99999999999999999999999 must be at most 86400"},
      {{"--log-level", "verbose"}, "log-level: 'verbose' is not one of trace, debug, info, warn, error"},
  };
  for (const BadValue& bad : cases) {
    std::string message = MustFail(bad.args);
    INFO(message);
    CHECK(Contains(message, "kvpeerd: " + bad.expected));
  }
}

TEST_CASE("idle-peer-timeout-s takes whole seconds, 0 turning the idle close off") {
  CHECK(MustParse({"--idle-peer-timeout-s", "1"}).idle_peer_timeout == std::chrono::seconds(1));
  CHECK(MustParse({"--idle-peer-timeout-s", "0"}).idle_peer_timeout == std::chrono::seconds(0));
  CHECK(MustParse({"--idle-peer-timeout-s=86400"}).idle_peer_timeout == std::chrono::seconds(86400));
}

TEST_CASE("a hash-seed with a control character is refused, naming it") {
  // It travels in connect, whose rule forbids control characters.
  const std::string message = MustFail({"--hash-seed", "seed\x1b[31m"});
  CHECK(Contains(message, "hash-seed"));
  CHECK(Contains(message, "character 5 is U+001B"));
}

TEST_CASE("every problem is reported, one line each") {
  std::string message = MustFail({"--listen", "x", "--block-len", "0", "--log-level", "loud"});
  CHECK(Contains(message, "kvpeerd: listen: 'x'"));
  CHECK(Contains(message, "kvpeerd: block-len: 0"));
  CHECK(Contains(message, "kvpeerd: log-level: 'loud'"));
  CHECK(std::count(message.begin(), message.end(), '\n') == 3);
}

TEST_CASE("command-line misuse exits 2 naming the flag") {
  CHECK(Contains(MustFail({"--bogus"}), "--bogus"));
  CHECK(Contains(MustFail({"stray"}), "stray"));
  CHECK(Contains(MustFail({"--listen"}), "--listen"));
  CHECK(Contains(MustFail({"--listen", "a:1", "--listen", "b:2"}), "--listen"));
}

TEST_CASE("help and version flags exit 0") {
  ParseResult help = Parse({"--help"});
  CHECK_FALSE(help.settings.has_value());
  CHECK(help.exit_code == 0);
  for (const OptionSpec& option : Options()) {
    CHECK(Contains(help.message, "--" + std::string(option.name)));
    if (!option.default_text.empty()) CHECK(Contains(help.message, "[default: " + std::string(option.default_text)));
  }
  CHECK(Contains(help.message, "--check-config"));

  ParseResult version = Parse({"--version", "--listen", "bad"});
  CHECK(version.exit_code == 0);
  CHECK(Contains(version.message, std::string("kvpeerd ") + kVersion));
}

TEST_CASE("--help states each bounded option's range from its row") {
  const std::string help = Parse({"--help"}).message;
  CHECK_FALSE(Contains(help, "{range}"));
  for (const OptionSpec& option : Options()) {
    if (!option.bounded()) continue;
    INFO(option.name);
    CHECK(Contains(option.HelpText(), option.RangeText()));
    CHECK(Contains(help, option.HelpText()));
  }
}

TEST_CASE("check-config flag: exits 0 with the effective settings or 2 with the reason") {
  ParseResult valid = Parse({"--check-config", "--listen", "127.0.0.1:7000"});
  CHECK_FALSE(valid.settings.has_value());
  CHECK(valid.exit_code == 0);
  CHECK(Contains(valid.message, "configuration is valid"));
  CHECK(Contains(valid.message, "\"listen\":\"127.0.0.1:7000\""));

  ParseResult invalid = Parse({"--check-config", "--listen", "127.0.0.1"});
  CHECK(invalid.exit_code == 2);
  CHECK(Contains(invalid.message, "listen: '127.0.0.1' is not HOST:PORT"));
}

TEST_CASE("EffectiveConfigJson has every option, by flag name, and never the key") {
  TempDir dir;
  std::string psk = dir.Write("psk", kGoodKey);
  Settings s = MustParse({"--psk-file", psk, "--allow-cidr", "10.0.0.0/8", "--block-len", "16"});
  boost::json::object config = EffectiveConfigJson(s);
  CHECK(config.size() == Options().size());
  for (const OptionSpec& option : Options()) CHECK(config.contains(option.name));
  CHECK(config.at("psk-file") == psk.c_str());
  CHECK(config.at("block-len") == 16);
  CHECK(config.at("hash-seed").is_null());
  CHECK(config.at("config").is_null());
  CHECK(config.at("load-timeout-s") == 30);
  CHECK(boost::json::serialize(config.at("allow-cidr")) == R"(["10.0.0.0/8"])");
  CHECK_FALSE(Contains(boost::json::serialize(config), kGoodKey));
}

TEST_CASE("the PSK file rules are checked at parse time") {
  TempDir dir;
  std::string loose = dir.Write("loose", kGoodKey, 0640);
  std::string message = MustFail({"--psk-file", loose});
  CHECK(Contains(message, "kvpeerd: psk-file: '" + loose + "' grants permissions to group or others (mode 0640)"));
  std::string missing = dir.path() + "/missing";
  CHECK(Contains(MustFail({"--psk-file", missing}), "psk-file: '" + missing + "' cannot be opened: No such file"));
}

// Wire spec 1.1 section 5: mode & 0077 must be zero. Start-up and the SIGHUP
// reload both parse the command line (Daemon::Reload), so both refuse it.
TEST_CASE("a PSK file others may write (0602) is refused at parse time, naming the mode") {
  TempDir dir;
  std::string writable = dir.Write("writable", kGoodKey, 0602);
  CHECK(Contains(MustFail({"--psk-file", writable}),
                 "kvpeerd: psk-file: '" + writable + "' grants permissions to group or others (mode 0602)"));
}

}  // namespace
}  // namespace kvpeer::config
