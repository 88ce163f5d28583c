// Daemon: one kvpeerd node. It composes the parts on one io_context: the
// node's model settings, the node's published blocks, the engines (control
// side), the peers (peer side), the control socket and the optional metrics
// listener, and runs them until SIGTERM/SIGINT, when it drains: every job
// ends with a result before the control socket closes, within a bounded time.
//
// SIGHUP reloads: the command line (`argv`) is parsed again, which re-reads
// the config file and the PSK file, and the options marked live in the
// option table (log-level, allow-cidr, psk-file) take effect for what
// happens from then on; each change is logged, as is every changed option
// that needs a restart (and is ignored). An invalid file changes nothing.
// The parse runs on the event loop, so every file it reads is opened
// non-blocking and must be a bounded regular file (config/checked_file.h):
// a FIFO at a path fails the reload at once instead of stalling the loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/status.h"
#include "config/settings.h"

namespace kvpeer::daemon {

class Daemon {
 public:
  // `argv` is the command line the settings came from (for SIGHUP); empty:
  // SIGHUP only says that there is nothing to re-read.
  explicit Daemon(config::Settings settings, std::vector<std::string> argv = {});
  ~Daemon();

  // Runs until a termination signal has been handled; the exit status.
  int Run();

 private:
  struct Parts;
  // Gives the peers their TLS context when a certificate is configured.
  Status SetUpPeerTls();
  // On SIGTERM/SIGINT: drains, then stops the event loop after kDrainGrace.
  void WaitForTermination();
  void WaitForReload();
  void Reload();
  // Pushes the live settings into the running parts.
  void ApplyLive();

  config::Settings settings_;
  config::Settings loaded_;  // as last parsed (node id unresolved), for reload diffs
  std::vector<std::string> argv_;
  boost::asio::io_context io_;
  std::unique_ptr<Parts> parts_;
  bool draining_ = false;  // from the termination signal on, systemd's STATUS says so
};

}  // namespace kvpeer::daemon
