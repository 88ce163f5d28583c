// The node's model settings (block_len, config_fingerprint, hash_seed).
//
// Settings the configuration leaves unset are taken from the first engine
// `hello` and then fixed for the daemon's lifetime. Until all three are
// known the node neither dials nor accepts peers (wire spec section 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/api/api_error.h"

namespace kvpeer::daemon {

struct ModelSettings {
  uint64_t block_len = 0;
  std::string config_fingerprint;
  std::string hash_seed;
};

class NodeModel {
 public:
  NodeModel(std::optional<uint64_t> block_len, std::optional<std::string> config_fingerprint,
            std::optional<std::string> hash_seed);

  // True once every setting is known.
  bool configured() const;
  // REQUIRES: configured().
  ModelSettings settings() const;

  // Checks an engine's hello against the node's settings, adopting the ones
  // still unset. Returns kIncompatible naming the first differing field
  // (hash_seed values are never echoed).
  //
  // `may_adopt` not ok: the engine may only join settings that are fixed
  // (the config's, or a first hello's from a caller allowed to fix them):
  // a hello that would have to adopt one is kIncompatible naming the unset
  // settings and `may_adopt`'s message (why this caller may not).
  Status CheckOrAdopt(const ModelSettings& engine, const Status& may_adopt = Status::Ok());

 private:
  std::optional<uint64_t> block_len_;
  std::optional<std::string> config_fingerprint_;
  std::optional<std::string> hash_seed_;
};

}  // namespace kvpeer::daemon
