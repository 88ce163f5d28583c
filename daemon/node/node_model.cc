#include "daemon/node/node_model.h"

namespace kvpeer::daemon {

NodeModel::NodeModel(std::optional<uint64_t> block_len, std::optional<std::string> config_fingerprint,
                     std::optional<std::string> hash_seed)
    : block_len_(block_len), config_fingerprint_(std::move(config_fingerprint)), hash_seed_(std::move(hash_seed)) {}

bool NodeModel::configured() const { return block_len_ && config_fingerprint_ && hash_seed_; }

ModelSettings NodeModel::settings() const { return {*block_len_, *config_fingerprint_, *hash_seed_}; }

Status NodeModel::CheckOrAdopt(const ModelSettings& engine, const Status& may_adopt) {
  // Check everything before adopting anything, so a rejected hello changes nothing.
  if (block_len_ && *block_len_ != engine.block_len) {
    return Status::Incompatible("block_len " + std::to_string(engine.block_len) + " differs from the node's " +
                                std::to_string(*block_len_));
  }
  if (config_fingerprint_ && *config_fingerprint_ != engine.config_fingerprint) {
    return Status::Incompatible("config_fingerprint '" + engine.config_fingerprint + "' differs from the node's '" +
                                *config_fingerprint_ + "'");
  }
  if (hash_seed_ && *hash_seed_ != engine.hash_seed) {
    return Status::Incompatible("hash_seed differs from the node's");
  }
  if (!configured() && !may_adopt.ok()) {
    std::string unset;
    if (!block_len_) unset += "block_len";
    if (!config_fingerprint_) unset += std::string(unset.empty() ? "" : ", ") + "config_fingerprint";
    if (!hash_seed_) unset += std::string(unset.empty() ? "" : ", ") + "hash_seed";
    return Status::Incompatible("the node's model settings (" + unset +
                                ") are not fixed yet (neither in its config nor by a publisher's hello), and this "
                                "hello may not fix them: " +
                                may_adopt.message() +
                                "; set block-len, config-fingerprint and hash-seed in the daemon's config, or let a "
                                "publisher engine say hello first");
  }
  block_len_ = engine.block_len;
  config_fingerprint_ = engine.config_fingerprint;
  hash_seed_ = engine.hash_seed;
  return Status::Ok();
}

}  // namespace kvpeer::daemon
