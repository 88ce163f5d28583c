// kvpeerctl: the operator CLI of kvpeerd (docs/control-api.md, "4. Operator
// operations" and "8. Command lines").
//
//   kvpeerctl [--socket PATH] [--json] [--timeout-s S] COMMAND [PEER]
//
// Exit status: 0 success, 1 the daemon answered with an error, 2 the daemon
// could not be reached (or did not answer) or the command line is wrong.
#include <boost/json/serialize.hpp>
#include <charconv>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/control_client.h"
#include "cli/finite_json.h"
#include "cli/status_view.h"
#include "base/host_port.h"
#include "config/printable.h"
#include "config/settings.h"
#include "config/version.h"

namespace {

namespace json = boost::json;

constexpr int kExitOk = 0;
constexpr int kExitDaemonError = 1;
constexpr int kExitUnreachable = 2;

constexpr const char* kUsage =
    "usage: kvpeerctl [--socket PATH] [--json] [--timeout-s S] COMMAND\n"
    "\n"
    "commands:\n"
    "  status            node, peers, engines and counters\n"
    "  peers             the peers table\n"
    "  metrics           Prometheus text exposition\n"
    "  connect PEER      dial PEER (HOST:PORT) now\n"
    "  disconnect PEER   close the session with PEER; its work fails\n"
    "\n"
    "options (before or after the command):\n"
    "  --socket PATH     control socket [default: /run/kvpeer/kvpeerd.sock]\n"
    "  --json            print the daemon's JSON answer (peers: the peers array);\n"
    "                    numbers beyond double range are printed as null\n"
    "  --timeout-s S     how long the whole exchange may take [default: 60]\n"
    "  --help, --version\n"
    "\n"
    "exit status: 0 success, 1 the daemon answered with an error, 2 unreachable or usage error\n";

struct Invocation {
  std::string socket_path = kvpeer::config::kDefaultSocketPath;
  bool json = false;
  std::chrono::seconds timeout{60};
  std::vector<std::string> words;  // the command and its argument
};

struct Outcome {
  int exit_code;
  std::string out;  // for stdout
  std::string err;  // for stderr
};

std::optional<Outcome> UsageError(const std::string& what) {
  return Outcome{kExitUnreachable, "", "kvpeerctl: " + what + "\nRun 'kvpeerctl --help' for usage.\n"};
}

std::optional<Outcome> ParseTimeout(const std::string& text, Invocation* invocation) {
  int seconds = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (error != std::errc() || end != text.data() + text.size() || seconds <= 0) {
    return UsageError("--timeout-s: '" + text + "' must be a whole number of seconds > 0");
  }
  invocation->timeout = std::chrono::seconds(seconds);
  return std::nullopt;
}

// Fills *invocation; returns an Outcome when the process should exit now
// (help, version, usage error).
std::optional<Outcome> ParseArgs(const std::vector<std::string>& args, Invocation* invocation) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](const std::string& flag) -> std::optional<std::string> {
      if (arg.starts_with(flag + "=")) return arg.substr(flag.size() + 1);
      if (arg == flag && i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") return Outcome{kExitOk, kUsage, ""};
    if (arg == "--version") return Outcome{kExitOk, std::string("kvpeerctl ") + kvpeer::kVersion + "\n", ""};
    if (arg == "--json") {
      invocation->json = true;
    } else if (arg == "--socket" || arg.starts_with("--socket=")) {
      std::optional<std::string> path = value("--socket");
      if (!path || path->empty()) return UsageError("--socket needs a PATH");
      invocation->socket_path = *path;
    } else if (arg == "--timeout-s" || arg.starts_with("--timeout-s=")) {
      std::optional<std::string> text = value("--timeout-s");
      if (!text) return UsageError("--timeout-s needs a number of seconds");
      if (auto error = ParseTimeout(*text, invocation)) return error;
    } else if (arg.starts_with("-") && arg != "-") {
      return UsageError("unknown option '" + arg + "'");
    } else {
      invocation->words.push_back(arg);
    }
  }
  return std::nullopt;
}

// The control API request for the command words, or a usage error.
std::optional<Outcome> BuildRequest(const std::vector<std::string>& words, json::object* request) {
  if (words.empty()) return UsageError("missing COMMAND (status, peers, metrics, connect PEER, disconnect PEER)");
  const std::string& command = words[0];
  bool takes_peer = command == "connect" || command == "disconnect";
  if (command != "status" && command != "peers" && command != "metrics" && !takes_peer) {
    return UsageError("unknown command '" + command + "' (status, peers, metrics, connect PEER, disconnect PEER)");
  }
  size_t expected = takes_peer ? 2 : 1;
  if (words.size() < expected) return UsageError(command + " needs a PEER (HOST:PORT)");
  if (words.size() > expected) return UsageError("unexpected argument '" + words[expected] + "' after " + command);
  (*request)["id"] = 1;
  (*request)["op"] = command == "peers" ? "status" : command;
  if (takes_peer) {
    if (!kvpeer::ParseHostPort(words[1])) {
      return UsageError("PEER '" + words[1] + "' is not HOST:PORT (port 0..65535; IPv6 as [::1]:5710)");
    }
    (*request)["peer"] = words[1];
  }
  return std::nullopt;
}

std::string DaemonError(const std::string& command, const json::object& response) {
  std::string code = "internal", message = "the daemon answered ok:false without an error object";
  auto error = response.find("error");
  if (error != response.end() && error->value().is_object()) {
    const json::object& details = error->value().as_object();
    if (auto it = details.find("code"); it != details.end() && it->value().is_string()) code = it->value().as_string();
    if (auto it = details.find("message"); it != details.end() && it->value().is_string()) {
      message = it->value().as_string();
    }
  }
  // The message may quote a peer's or an engine's strings.
  return "kvpeerctl: " + command + " failed: " + kvpeer::config::Printable(code) + ": " +
         kvpeer::config::Printable(message) + "\n";
}

// What a successful answer prints.
std::string Render(const Invocation& invocation, const json::object& response) {
  const std::string& command = invocation.words[0];
  std::ostringstream out;
  if (command == "peers" && invocation.json) {
    auto peers = response.find("peers");
    out << (peers != response.end() ? json::serialize(peers->value()) : "[]") << "\n";
  } else if (invocation.json) {
    out << json::serialize(response) << "\n";
  } else if (command == "status") {
    kvpeer::cli::PrintStatus(response, out);
  } else if (command == "peers") {
    kvpeer::cli::PrintPeers(response, out);
  } else if (command == "metrics") {
    auto text = response.find("text");
    std::string body =
        text != response.end() && text->value().is_string() ? std::string(text->value().as_string()) : "";
    out << body << (body.empty() || body.ends_with('\n') ? "" : "\n");
  } else {
    out << (command == "connect" ? "connected to " : "disconnected from ") << invocation.words[1] << "\n";
  }
  return out.str();
}

Outcome Run(const Invocation& invocation, const json::object& request) {
  kvpeer::StatusOr<json::object> response = kvpeer::cli::Exchange(invocation.socket_path, request, invocation.timeout);
  if (!response.ok()) return {kExitUnreachable, "", "kvpeerctl: " + response.status().message() + "\n"};
  // Every view prints from here, so --json is always valid JSON and the
  // tables show "-" where the daemon sent a number beyond double range.
  kvpeer::cli::NullNonFinite(*response);
  auto ok = response->find("ok");
  if (ok != response->end() && ok->value().is_bool() && ok->value().as_bool()) {
    return {kExitOk, Render(invocation, *response), ""};
  }
  // With --json the answer is printed even on failure, for scripts.
  std::string out = invocation.json ? json::serialize(*response) + "\n" : "";
  return {kExitDaemonError, out, DaemonError(invocation.words[0], *response)};
}

}  // namespace

int main(int argc, char** argv) {
  Invocation invocation;
  json::object request;
  std::optional<Outcome> early = ParseArgs(std::vector<std::string>(argv + 1, argv + argc), &invocation);
  if (!early) early = BuildRequest(invocation.words, &request);
  Outcome outcome = early ? *early : Run(invocation, request);
  std::cout << outcome.out;
  std::cerr << outcome.err;
  return outcome.exit_code;
}
