// A ServerRole wired to the shared fakes: one memory region whose block i
// is published under Key(i), a hand-moved clock, and a FrameLog standing in
// for the connection. Pull() plays the connection's writer: it produces one
// data frame and "writes" it (records its payload bytes, then drops the
// frame's pins, as a written frame would).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "protocol/messages.h"
#include "session/server_role.h"
#include "tests/session/fakes.h"

// Own namespace: other suites' helpers live in `testing` too, and inline
// functions of the same name would break the one-definition rule.
namespace kvpeer::session::testing::server_test {

inline constexpr uint64_t kServerBlockLen = 64;
inline constexpr uint32_t kServerBlocks = 64;

inline protocol::Key Key(int i) { return "key-" + std::to_string(i); }

inline std::vector<protocol::Key> Keys(std::initializer_list<int> ids) {
  std::vector<protocol::Key> keys;
  for (int id : ids) keys.push_back(Key(id));
  return keys;
}

inline ServerConfig DefaultServerConfig() {
  ServerConfig config;
  config.block_len = kServerBlockLen;
  return config;
}

class ServerHarness {
 public:
  explicit ServerHarness(ServerConfig config = DefaultServerConfig())
      : region(std::make_shared<MemoryRegion>(kServerBlocks, kServerBlockLen)), index(region) {
    for (uint32_t i = 0; i < kServerBlocks; ++i) region->Fill(i, 1000 + i);
    role = std::make_unique<ServerRole>("peer:1", config, clock.AsClock(), log.AsSend(), index);
  }

  // Publishes Key(id) at block `id`.
  void Publish(std::initializer_list<int> ids) {
    for (int id : ids) index.Publish(Key(id), static_cast<uint32_t>(id));
  }

  void Lookup(const std::string& kv, std::initializer_list<int> ids, protocol::RoundSeq round) {
    role->OnLookup(protocol::Lookup{kv, Keys(ids), round});
  }
  // Fetches Key(ids[i]) into destination dests[i].
  Status Fetch(const std::string& kv, std::initializer_list<int> ids, std::vector<protocol::SlotIndex> dests,
               protocol::RoundSeq round) {
    return role->OnFetch(protocol::Fetch{kv, Keys(ids), std::move(dests), round});
  }
  Status TerminalFetch(const std::string& kv, protocol::RoundSeq round) {
    return role->OnFetch(protocol::Fetch{kv, {}, {}, round});
  }
  void Abort(const std::string& kv, protocol::RoundSeq round) { role->OnAbortFetch(protocol::AbortFetch{kv, round}); }
  // A store job supplying Key(id) from block `id`.
  void Store(JobId job, const std::string& kv, std::initializer_list<int> ids) {
    std::vector<PinRef> pins;
    for (int id : ids) pins.push_back(region->Pin(static_cast<uint32_t>(id)));
    role->AddSupply(job, kv, Keys(ids), std::move(pins));
  }

  // One writer step: produce a data frame and write it.
  bool Pull() {
    const bool sent = role->ProduceDataFrame();
    WriteFrames();
    return sent;
  }
  // Pulls until the role has nothing more; returns the number of pulls.
  int Drain() {
    int pulls = 0;
    while (role->HasDataToSend() && pulls < 100000) {
      Pull();
      ++pulls;
    }
    return pulls;
  }
  // "Writes" every frame still holding pins: records its payload, drops them.
  void WriteFrames() {
    for (size_t i = 0; i < log.frames.size(); ++i) {
      OutFrame& frame = log.frames[i];
      if (frame.blocks.empty()) continue;
      std::vector<uint8_t> payload;
      for (const PinRef& pin : frame.blocks) payload.insert(payload.end(), pin->bytes().begin(), pin->bytes().end());
      payloads[i] = std::move(payload);
      frame.blocks.clear();
    }
  }

  std::vector<std::string> Types() const {
    std::vector<std::string> types;
    for (const OutFrame& frame : log.frames) types.emplace_back(protocol::TypeName(frame.message));
    return types;
  }
  template <typename T>
  std::vector<T> All() const {
    return log.All<T>();
  }
  std::vector<JobResult> Results() { return role->TakeStoreResults(); }

  // Destination index -> the bytes written there, over every block_data.
  std::map<protocol::SlotIndex, std::vector<uint8_t>> Received(const std::string& kv, protocol::RoundSeq round) const {
    std::map<protocol::SlotIndex, std::vector<uint8_t>> received;
    for (size_t i = 0; i < log.frames.size(); ++i) {
      const auto* data = std::get_if<protocol::BlockData>(&log.frames[i].message);
      if (!data || data->kv_request_id != kv || data->round_seq != round) continue;
      const std::vector<uint8_t>& payload = payloads.at(i);
      for (size_t b = 0; b < data->block_indexes.size(); ++b) {
        auto first = payload.begin() + static_cast<std::ptrdiff_t>(b * kServerBlockLen);
        received[data->block_indexes[b]].assign(first, first + static_cast<std::ptrdiff_t>(kServerBlockLen));
      }
    }
    return received;
  }
  std::vector<uint8_t> BlockBytes(int id) const {
    auto block = region->Block(static_cast<uint32_t>(id));
    return {block.begin(), block.end()};
  }

  std::shared_ptr<MemoryRegion> region;
  MemoryIndex index;
  FakeClock clock;
  FrameLog log;
  std::map<size_t, std::vector<uint8_t>> payloads;  // frame index -> written payload
  std::unique_ptr<ServerRole> role;
};

inline bool Done(const protocol::TransferDone& done, const std::string& kv, bool success, protocol::RoundSeq round) {
  return done.kv_request_id == kv && done.success == success && done.round_seq == round;
}

}  // namespace kvpeer::session::testing::server_test
