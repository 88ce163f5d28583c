#include "daemon/node/node_model.h"

namespace kvpeer::daemon {

NodeModel::NodeModel(std::optional<uint64_t> block_len, std::optional<std::string> config_fingerprint,
                     std::optional<std::string> hash_seed)
    : block_len_(block_len), config_fingerprint_(std::move(config_fingerprint)), hash_seed_(std::move(hash_seed)) {}

bool NodeModel::configured() const { return block_len_ && config_fingerprint_ && hash_seed_; }

ModelSettings NodeModel::settings() const { return {*block_len_, *config_fingerprint_, *hash_seed_}; }

Status NodeModel::CheckOrAdopt(const ModelSettings& engine) {
  // Check everything before adopting anything, so a rejected hello changes nothing.
  if (block_len_ && *block_len_ != engine.block_len) {
    return Status::Incompatible("block_len " + std::to_string(engine.block_len) +
                                    " differs from the node's " + std::to_string(*block_len_));
  }
  if (config_fingerprint_ && *config_fingerprint_ != engine.config_fingerprint) {
    return Status::Incompatible("config_fingerprint '" + engine.config_fingerprint +
                                    "' differs from the node's '" + *config_fingerprint_ + "'");
  }
  if (hash_seed_ && *hash_seed_ != engine.hash_seed) {
    return Status::Incompatible("hash_seed differs from the node's");
  }
  block_len_ = engine.block_len;
  config_fingerprint_ = engine.config_fingerprint;
  hash_seed_ = engine.hash_seed;
  return Status::Ok();
}

}  // namespace kvpeer::daemon
