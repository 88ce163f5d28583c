// Daemon: one kvpeerd node. It composes the parts on one io_context: the
// node's model settings, the node-wide block index, the engines (control
// side), the peers (peer side) and the control socket, and runs them until
// SIGTERM/SIGINT, when it drains: every job ends with a result before the
// control socket closes, within a bounded time.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "config/settings.h"

namespace kvpeer::daemon {

class Daemon {
 public:
  explicit Daemon(config::Settings settings);
  ~Daemon();

  // Runs until a termination signal has been handled; the exit status.
  int Run();

 private:
  struct Parts;
  config::Settings settings_;
  boost::asio::io_context io_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace kvpeer::daemon
