#include "config/named_files.h"

#include <array>
#include <string_view>
#include <utility>

#include "config/checked_file.h"

namespace kvpeer::config {
namespace {

std::vector<std::string> ConfigFileArguments(int argc, const char* const* argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--config" && i + 1 < argc) files.emplace_back(argv[i + 1]);
    if (arg.starts_with("--config=")) files.emplace_back(arg.substr(std::string_view("--config=").size()));
  }
  return files;
}

}  // namespace

// CLI11 reads the config file with a blocking std::ifstream, on the event
// loop when SIGHUP re-parses, so a FIFO or device put at the path would
// stall the daemon; the file is checked first. (A swap between this check
// and CLI11's read needs write access to the file's directory, i.e. the
// operator's.)
Status CheckConfigFiles(int argc, const char* const* argv) {
  const FileRule rule{.max_bytes = kMaxConfigFileBytes, .kind = "a config file"};
  for (const std::string& file : ConfigFileArguments(argc, argv)) {
    const Status check = CheckFile(file, rule);
    if (!check.ok() && check.code() != Status::Code::kNotFound) {
      return Status::Invalid("kvpeerd: config: " + check.message() + "\n");
    }
  }
  return Status::Ok();
}

std::vector<std::string> TlsFileProblems(const Settings& s) {
  const std::array<std::pair<const char*, const std::string*>, 3> files = {
      {{"tls-cert", &s.tls_cert}, {"tls-key", &s.tls_key}, {"tls-ca", &s.tls_ca}}};
  std::string given;
  std::string missing;
  for (const auto& [name, path] : files) (path->empty() ? missing : given) += std::string(name) + " ";
  if (given.empty()) return {};
  if (!missing.empty()) {
    return {"tls-cert, tls-key, tls-ca: give all three or none (missing: " + missing.substr(0, missing.size() - 1) +
            ")"};
  }
  std::vector<std::string> problems;
  for (const auto& [name, path] : files) {
    const FileRule rule = path == &s.tls_key ? SecretFileRule(kMaxTlsFileBytes) : TrustedFileRule(kMaxTlsFileBytes);
    if (Status check = CheckFile(*path, rule); !check.ok())
      problems.push_back(std::string(name) + ": " + check.message());
  }
  return problems;
}

}  // namespace kvpeer::config
