// The checks on every file kvpeerd reads at start and on SIGHUP
// (config/checked_file.h): non-blocking open, regular file, size bound,
// forbidden mode bits; and the config file's check before CLI11 reads it.
//
// A FIFO is the attack: opened the old way (blocking), it waits for a writer
// that never comes, and these tests would hang until ctest's timeout.
#include "config/checked_file.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "test_files.h"

namespace kvpeer::config {
namespace {

using testing::Contains;
using testing::Parse;
using testing::TempDir;

std::string MakeFifo(const TempDir& dir, const std::string& name) {
  const std::string path = dir.path() + "/" + name;
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  return path;
}

TEST_CASE("a checked file is read whole when it passes the rule") {
  TempDir dir;
  const StatusOr<std::string> contents = ReadCheckedFile(dir.Write("key", "secret", 0600), SecretFileRule(64));
  REQUIRE(contents.ok());
  CHECK(*contents == "secret");
  CHECK(CheckFile(dir.Write("key", "secret", 0600), SecretFileRule(64)).ok());
}

TEST_CASE("a FIFO at a checked path is refused at once, without waiting for a writer") {
  TempDir dir;
  const std::string fifo = MakeFifo(dir, "fifo");
  const auto started = std::chrono::steady_clock::now();
  const StatusOr<std::string> contents = ReadCheckedFile(fifo, SecretFileRule(64));
  REQUIRE_FALSE(contents.ok());
  CHECK(contents.status().code() == Status::Code::kInvalid);
  CHECK(contents.status().message() == "'" + fifo + "' is not a regular file");
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
}

TEST_CASE("each file problem has its code, and the message names the path") {
  TempDir dir;
  const FileRule rule = TrustedFileRule(8);
  const Status missing = CheckFile(dir.path() + "/none", rule);
  CHECK(missing.code() == Status::Code::kNotFound);
  CHECK(Contains(missing.message(), "'" + dir.path() + "/none' cannot be opened: No such file"));
  CHECK(CheckFile(dir.path(), rule).code() == Status::Code::kInvalid);
  const std::string big = dir.Write("big", "123456789", 0644);
  const Status too_large = CheckFile(big, rule);
  CHECK(too_large.code() == Status::Code::kTooLarge);
  CHECK(too_large.message() == "'" + big + "' is 9 bytes; a PEM file is at most 8");
  CHECK(ReadCheckedFile(big, rule).status().code() == Status::Code::kTooLarge);
  const std::string loose = dir.Write("loose", "pem", 0664);
  const Status writable = CheckFile(loose, rule);
  CHECK(writable.code() == Status::Code::kInvalid);
  CHECK(writable.message() == "'" + loose +
                                  "' is writable by group or others (mode 0664); allowed: writable by the "
                                  "owner only, e.g. chmod 644");
  CHECK(CheckFile(dir.Write("readable", "pem", 0644), rule).ok());
}

TEST_CASE("a FIFO, directory or huge file as the config file exits 2 naming it, before anything reads it") {
  TempDir dir;
  const std::string fifo = MakeFifo(dir, "kvpeerd.toml");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--config", fifo}, std::vector<std::string>{"--config=" + fifo}}) {
    ParseResult result = Parse(args);
    CHECK(result.exit_code == 2);
    CHECK(result.message == "kvpeerd: config: '" + fifo + "' is not a regular file\n");
  }
  CHECK(
      Contains(Parse({"--config", dir.path()}).message, "kvpeerd: config: '" + dir.path() + "' is not a regular file"));
  const std::string huge = dir.Write("huge.toml", std::string(1024 * 1024 + 1, '#'));
  CHECK(Contains(Parse({"--config", huge}).message, "is 1048577 bytes; a config file is at most 1048576"));
}

TEST_CASE("a FIFO as the psk-file or a TLS file is refused at once, naming the option and the path") {
  TempDir dir;
  const std::string fifo = MakeFifo(dir, "fifo");
  CHECK(Contains(Parse({"--psk-file", fifo}).message, "kvpeerd: psk-file: '" + fifo + "' is not a regular file"));
  const std::string cert = dir.Write("node.crt", "cert", 0644);
  const std::string key = dir.Write("node.key", "key", 0600);
  CHECK(Contains(Parse({"--tls-cert", cert, "--tls-key", fifo, "--tls-ca", cert}).message,
                 "kvpeerd: tls-key: '" + fifo + "' is not a regular file"));
  CHECK(Contains(Parse({"--tls-cert", cert, "--tls-key", key, "--tls-ca", fifo}).message,
                 "kvpeerd: tls-ca: '" + fifo + "' is not a regular file"));
}

}  // namespace
}  // namespace kvpeer::config
