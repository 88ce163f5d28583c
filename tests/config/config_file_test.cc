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

TEST_CASE("every key can come from the TOML file, arrays included") {
  TempDir dir;
  std::string psk = dir.Write("psk", std::string(32, 'p') + "\r\n");
  std::string file = dir.Write("kvpeerd.toml",
                               "# kvpeerd settings\n"
                               "listen = \"127.0.0.1:6100\"\n"
                               "node-id = \"node-b:6100\"   # trailing comment\n"
                               "socket = \"/tmp/b.sock\"\n"
                               "block-len = 65_536\n"
                               "config-fingerprint = \"model#1\"\n"
                               "hash-seed = 'raw\\seed'\n"
                               "psk-file = \"" +
                                   psk +
                                   "\"\n"
                                   "allow-cidr = [\"10.0.0.0/8\", \"fd00::/8\"]\n"
                                   "load-timeout-s = 5\n"
                                   "abort-ack-timeout-s = 6\n"
                                   "handshake-timeout-s = 7\n"
                                   "log-level = \"warn\"\n");
  ParseResult result = Parse({"--config", file});
  INFO(result.message);
  REQUIRE(result.settings.has_value());
  const Settings& s = *result.settings;
  CHECK(s.config_file == file);
  CHECK(FormatHostPort(s.listen) == "127.0.0.1:6100");
  CHECK(s.node_id == "node-b:6100");
  CHECK(s.socket_path == "/tmp/b.sock");
  CHECK(s.block_len == 65536u);
  CHECK(s.config_fingerprint == "model#1");  // '#' inside quotes is not a comment
  CHECK(s.hash_seed == "raw\\seed");         // literal strings keep backslashes
  CHECK(s.psk == std::string(32, 'p'));
  REQUIRE(s.allow_cidrs.size() == 2);
  CHECK(s.allow_cidrs[1].ToString() == "fd00::/8");
  CHECK(s.load_timeout == std::chrono::seconds(5));
  CHECK(s.abort_ack_timeout == std::chrono::seconds(6));
  CHECK(s.handshake_timeout == std::chrono::seconds(7));
  CHECK(s.log_level == "warn");
  CHECK(EffectiveConfigJson(s).at("config") == file.c_str());
}

TEST_CASE("a flag overrides the file") {
  TempDir dir;
  std::string file = dir.Write("k.toml",
                               "listen = \"127.0.0.1:6100\"\n"
                               "log-level = \"warn\"\n"
                               "allow-cidr = [\"10.0.0.0/8\", \"192.168.0.0/16\"]\n");
  ParseResult result = Parse({"--listen", "127.0.0.1:6200", "--config", file, "--allow-cidr", "172.16.0.0/12"});
  REQUIRE(result.settings.has_value());
  CHECK(FormatHostPort(result.settings->listen) == "127.0.0.1:6200");
  CHECK(result.settings->log_level == "warn");
  // A repeatable flag replaces the file's list rather than appending to it.
  REQUIRE(result.settings->allow_cidrs.size() == 1);
  CHECK(result.settings->allow_cidrs[0].ToString() == "172.16.0.0/12");
}

TEST_CASE("file values are validated like flags") {
  TempDir dir;
  std::string file = dir.Write("k.toml", "load-timeout-s = -1\nallow-cidr = [\"10.0.0.0/33\"]\n");
  ParseResult result = Parse({"--config", file});
  CHECK(result.exit_code == 2);
  CHECK(Contains(result.message, "kvpeerd: load-timeout-s: -1 must be > 0"));
  CHECK(Contains(result.message, "kvpeerd: allow-cidr: '10.0.0.0/33' is not a CIDR"));
}

TEST_CASE("config file errors name the file, the line and the key") {
  TempDir dir;
  struct Case {
    std::string contents;
    std::string expected;
  };
  std::vector<Case> cases = {
      {"listen = \"127.0.0.1:1\"\nlisen = \"x\"\n", "line 2: unknown key 'lisen' (known keys: "},
      {"check-config = true\n", "unknown key 'check-config'"},
      {"config = \"other.toml\"\n", "unknown key 'config'"},
      {"[server]\nlisten = \"a:1\"\n", "line 1: tables ([section]) are not supported"},
      {"listen = [\"a:1\", \"b:2\"]\n", "line 1: 'listen' takes one value, not an array"},
      {"listen = 127.0.0.1:1\n", "line 1: the value of 'listen' must be quoted (\"127.0.0.1:1\")"},
      {"log-level = debug\n", "the value of 'log-level' must be a quoted string"},
      {"listen = \"a:1\"\nlisten = \"b:2\"\n", "line 2: key 'listen' is already set on line 1"},
      {"listen \"a:1\"\n", "line 1: expected '=' after 'listen'"},
      {"\n\nhash-seed = \"abc\n", "line 3: the string value of 'hash-seed' has no closing quote"},
      {"allow-cidr = [\"10.0.0.0/8\"\n", "line 1: the array of 'allow-cidr' has no closing ']'"},
      {"listen = \"a:1\" extra\n", "line 1: unexpected text after the value of 'listen'"},
  };
  for (const Case& c : cases) {
    std::string file = dir.Write("bad.toml", c.contents);
    ParseResult result = Parse({"--config", file});
    INFO(c.contents);
    INFO(result.message);
    CHECK(result.exit_code == 2);
    CHECK(Contains(result.message, "kvpeerd: config file '" + file + "': line "));
    CHECK(Contains(result.message, c.expected));
  }
}

TEST_CASE("an unreadable or missing config file exits 2 saying why") {
  TempDir dir;
  std::string missing = dir.path() + "/none.toml";
  ParseResult result = Parse({"--config", missing});
  CHECK(result.exit_code == 2);
  CHECK(Contains(result.message, "kvpeerd: config: cannot read '" + missing + "': No such file or directory"));
}

TEST_CASE("check-config flag: validates the file too") {
  TempDir dir;
  std::string good = dir.Write("good.toml", "listen = \"127.0.0.1:6300\"\n");
  std::string bad = dir.Write("bad.toml", "bogus = 1\n");
  CHECK(Parse({"--check-config", "--config", good}).exit_code == 0);
  ParseResult result = Parse({"--check-config", "--config", bad});
  CHECK(result.exit_code == 2);
  CHECK(Contains(result.message, "unknown key 'bogus'"));
}

}  // namespace
}  // namespace kvpeer::config
