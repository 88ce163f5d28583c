// Temporary files for the config tests: a private directory removed on
// destruction, and files written with an exact mode.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/settings.h"

namespace kvpeer::config::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvpeer-config-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `contents` to NAME in the directory with `mode`; returns the path.
  std::string Write(const std::string& name, const std::string& contents, mode_t mode = 0600) const {
    std::string path = path_ + "/" + name;
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << contents;
    }
    // chmod after writing: the umask must not decide the mode under test.
    ::chmod(path.c_str(), mode);
    return path;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ParseCommandLine on {"kvpeerd", args...}.
inline ParseResult Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvpeerd");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  argv.push_back(nullptr);
  return ParseCommandLine(static_cast<int>(args.size()), argv.data());
}

inline bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::string Hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace kvpeer::config::testing
