#include "config/psk.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "test_files.h"

namespace kvpeer::config {
namespace {

using testing::Contains;
using testing::TempDir;

const std::string kKey32(32, 'a');

std::string LoadOk(const std::string& path) {
  StatusOr<std::string> key = LoadPsk(path);
  INFO(key.status().message());
  REQUIRE(key.ok());
  return *key;
}

std::string LoadError(const std::string& path) {
  StatusOr<std::string> key = LoadPsk(path);
  REQUIRE_FALSE(key.ok());
  CHECK(key.status().code() == Status::Code::kInvalid);
  return key.status().message();
}

TEST_CASE("owner-only key files load") {
  TempDir dir;
  CHECK(LoadOk(dir.Write("k600", kKey32, 0600)) == kKey32);
  CHECK(LoadOk(dir.Write("k400", kKey32, 0400)) == kKey32);
  CHECK(LoadOk(dir.Write("k700", kKey32, 0700)) == kKey32);
}

// Wire spec 1.1 section 5: mode & 0077 must be zero. A key others can
// write is as bad as one they can read: they could plant their own.
TEST_CASE("key files granting group or others any permission are refused, naming the mode") {
  TempDir dir;
  for (mode_t mode : {0640, 0604, 0644, 0660, 0602, 0620, 0601, 0610, 0607, 0670}) {
    std::string path = dir.Write("loose", kKey32, mode);
    std::string message = LoadError(path);
    INFO(message);
    char expected[8];
    std::snprintf(expected, sizeof(expected), "%04o", static_cast<unsigned>(mode));
    CHECK(Contains(message, "psk-file: '" + path + "' grants permissions to group or others (mode " + expected + ")"));
    CHECK(Contains(message, "chmod 600"));
  }
}

TEST_CASE("exactly one trailing newline is removed, LF or CRLF") {
  TempDir dir;
  CHECK(LoadOk(dir.Write("lf", kKey32 + "\n")) == kKey32);
  CHECK(LoadOk(dir.Write("crlf", kKey32 + "\r\n")) == kKey32);
  CHECK(LoadOk(dir.Write("two", kKey32 + "\n\n")) == kKey32 + "\n");
  CHECK(LoadOk(dir.Write("crlf2", kKey32 + "\r\n\r\n")) == kKey32 + "\r\n");
  CHECK(LoadOk(dir.Write("cr", kKey32 + "\r")) == kKey32 + "\r");  // a lone CR is key material
  CHECK(StripOneNewline("x\n") == "x");
  CHECK(StripOneNewline("x\r\n") == "x");
  CHECK(StripOneNewline("\n") == "");
  CHECK(StripOneNewline("") == "");
}

TEST_CASE("keys shorter than 32 bytes after stripping are refused") {
  TempDir dir;
  std::string message = LoadError(dir.Write("short", std::string(31, 'a') + "\n"));
  CHECK(Contains(message, "holds a 31-byte key; at least 32 bytes are required"));
  LoadError(dir.Write("empty", ""));
  CHECK(LoadOk(dir.Write("binary", std::string(31, '\0') + "\x01")).size() == 32);
}

TEST_CASE("missing, unreadable and non-regular key files are refused") {
  TempDir dir;
  CHECK(Contains(LoadError(dir.path() + "/none"), "cannot be opened: No such file or directory"));
  CHECK(Contains(LoadError(dir.path()), "is not a regular file"));
  CHECK(Contains(LoadError(dir.Write("huge", std::string(kMaxPskFileBytes + 1, 'a'))), "a key file is at most"));
  if (::geteuid() == 0) {
    WARN("running as root: permission checks do not apply, the unreadable-file case is skipped");
    return;
  }
  CHECK(Contains(LoadError(dir.Write("noread", kKey32, 0200)), "cannot be opened: Permission denied"));
}

}  // namespace
}  // namespace kvpeer::config
