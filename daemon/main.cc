// kvpeerd: the per-node KV-cache block transfer daemon.
#include <cstring>
#include <iostream>

#include "config/version.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::cout << "kvpeerd " << kvpeer::kVersion << " (wire " << kvpeer::kWireVersion << ")\n";
      return 0;
    }
  }
  std::cerr << "kvpeerd: the daemon is not built yet; only --version is available\n";
  return 2;
}
