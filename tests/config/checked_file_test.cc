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
  std::string contents;
  const FileCheck check = ReadCheckedFile(dir.Write("key", "secret", 0600), SecretFileRule(64), &contents);
  CHECK(check.ok());
  CHECK(check.message.empty());
  CHECK(contents == "secret");
}

TEST_CASE("a FIFO at a checked path is refused at once, without waiting for a writer") {
  TempDir dir;
  const std::string fifo = MakeFifo(dir, "fifo");
  const auto started = std::chrono::steady_clock::now();
  std::string contents;
  const FileCheck check = ReadCheckedFile(fifo, SecretFileRule(64), &contents);
  CHECK(check.problem == FileProblem::kNotRegular);
  CHECK(check.message == "'" + fifo + "' is not a regular file");
  CHECK(contents.empty());
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
}

TEST_CASE("each file problem is its own cause, and the message names the path") {
  TempDir dir;
  const FileRule rule = TrustedFileRule(8);
  CHECK(ReadCheckedFile(dir.path() + "/none", rule, nullptr).problem == FileProblem::kCannotOpen);
  CHECK(ReadCheckedFile(dir.path(), rule, nullptr).problem == FileProblem::kNotRegular);
  const std::string big = dir.Write("big", "123456789", 0644);
  const FileCheck too_large = ReadCheckedFile(big, rule, nullptr);
  CHECK(too_large.problem == FileProblem::kTooLarge);
  CHECK(too_large.message == "'" + big + "' is 9 bytes; a PEM file is at most 8");
  const std::string loose = dir.Write("loose", "pem", 0664);
  const FileCheck writable = ReadCheckedFile(loose, rule, nullptr);
  CHECK(writable.problem == FileProblem::kModeForbidden);
  CHECK(writable.message == "'" + loose +
                                "' is writable by group or others (mode 0664); allowed: writable by the "
                                "owner only, e.g. chmod 644");
  CHECK(ReadCheckedFile(dir.Write("readable", "pem", 0644), rule, nullptr).ok());
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
