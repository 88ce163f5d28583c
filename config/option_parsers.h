// The parse and show functions of the option table's rows whose values
// have a shape of their own (Kind::kOther): addresses, paths, model
// settings, lists of CIDRs and features, the log level.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <boost/json/value.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "config/settings.h"

namespace kvpeer::config::parsers {

using Raw = std::vector<std::string>;

Status Config(const OptionSpec& row, const Raw& raw, Settings* s);
Status Listen(const OptionSpec& row, const Raw& raw, Settings* s);
Status NodeId(const OptionSpec& row, const Raw& raw, Settings* s);
Status Socket(const OptionSpec& row, const Raw& raw, Settings* s);
Status BlockLen(const OptionSpec& row, const Raw& raw, Settings* s);
Status Fingerprint(const OptionSpec& row, const Raw& raw, Settings* s);
Status HashSeed(const OptionSpec& row, const Raw& raw, Settings* s);
Status PskFile(const OptionSpec& row, const Raw& raw, Settings* s);
Status AllowCidr(const OptionSpec& row, const Raw& raw, Settings* s);
Status SocketGroup(const OptionSpec& row, const Raw& raw, Settings* s);
Status Features(const OptionSpec& row, const Raw& raw, Settings* s);
Status LogLevel(const OptionSpec& row, const Raw& raw, Settings* s);
Status MetricsListen(const OptionSpec& row, const Raw& raw, Settings* s);

boost::json::value ShowListen(const Settings& s);
boost::json::value ShowNodeId(const Settings& s);
boost::json::value ShowFingerprint(const Settings& s);
boost::json::value ShowHashSeed(const Settings& s);
boost::json::value ShowSocketGroup(const Settings& s);
boost::json::value ShowFeatures(const Settings& s);
boost::json::value ShowMetricsListen(const Settings& s);
boost::json::value ShowMaxRegionBytes(const Settings& s);

// psk-file's live copy: the path and the key read from it.
void CopyPsk(const Settings& from, Settings* to);

}  // namespace kvpeer::config::parsers
