// systemd service notifications (sd_notify(3)) for kvpeerd.
//
// Under a Type=notify unit, systemd passes NOTIFY_SOCKET (and, with
// WatchdogSec=, WATCHDOG_USEC and WATCHDOG_PID) in the environment. These
// functions send the state changes the units rely on: READY=1 once the
// listener and the control socket are up, STATUS= lines for `systemctl
// status`, WATCHDOG=1 keep-alives from the event loop, and STOPPING=1 when a
// termination signal starts the drain.
//
// Outside systemd (NOTIFY_SOCKET unset) every call does nothing, so the
// daemon behaves the same when started by hand or by the tests. A failure to
// send is logged and otherwise ignored: notification is best effort and
// never stops the node.
//
// Thread-safety: the functions keep no state; libsystemd reads the
// environment on every call, so they must not race with setenv(3).
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace kvpeer::daemon::systemd {

// READY=1 and STATUS=`status`.
void Ready(std::string_view status);

// STATUS=`status`: a one-line, human-readable state shown by systemctl
// (nothing is sent for an empty text).
void Status(std::string_view status);

// STOPPING=1 (and STATUS=`status` unless empty).
void Stopping(std::string_view status = {});

// WATCHDOG=1 (and STATUS=`status` unless empty).
void Watchdog(std::string_view status = {});

// The watchdog timeout systemd expects keep-alives within, when the
// watchdog is enabled for this process (sd_watchdog_enabled(3): WATCHDOG_USEC
// is set and WATCHDOG_PID is unset or names this process); nullopt
// otherwise. Send WATCHDOG=1 at about half this interval.
std::optional<std::chrono::microseconds> WatchdogInterval();

}  // namespace kvpeer::daemon::systemd
