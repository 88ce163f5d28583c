#include "config/psk.h"

#include "config/checked_file.h"

namespace kvpeer::config {
namespace {

Status PskError(const std::string& path, const std::string& what) {
  return Status::Invalid("psk-file: '" + path + "' " + what);
}

}  // namespace

std::string StripOneNewline(std::string contents) {
  if (contents.ends_with("\r\n")) {
    contents.resize(contents.size() - 2);
  } else if (contents.ends_with('\n')) {
    contents.pop_back();
  }
  return contents;
}

StatusOr<std::string> LoadPsk(const std::string& path) {
  // Wire spec 1.1 section 5: any permission for group or others refuses
  // the key, writable as well as readable (a writer could swap the key).
  StatusOr<std::string> contents = ReadCheckedFile(path, SecretFileRule(kMaxPskFileBytes));
  if (!contents.ok()) return Status::Invalid("psk-file: " + contents.status().message());
  std::string stripped = StripOneNewline(std::move(contents).value());
  if (stripped.size() < kMinPskBytes) {
    return PskError(path, "holds a " + std::to_string(stripped.size()) + "-byte key; at least " +
                              std::to_string(kMinPskBytes) +
                              " bytes are required (after removing one trailing newline)");
  }
  return stripped;
}

}  // namespace kvpeer::config
