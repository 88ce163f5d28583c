// A ClientRole wired to a hand-moved clock, a frame log and one in-memory
// destination region, with helpers that play the producer's part: answer
// lookups, deliver block_data frames (real bytes into real slots), finish
// rounds. Used by the client_*_test.cc files.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "session/client_role.h"
#include "tests/session/fakes.h"

namespace kvpeer::session::testing {

inline constexpr uint64_t kClientBlockLen = 16;
inline constexpr uint32_t kClientSlots = 32;

// A distinct key per number, with a non-printable byte so keys are bytes.
inline protocol::Key TestKey(int n) { return std::string("\x01key-", 5) + std::to_string(n); }

// The bytes the fake producer sends for (round, index): distinct per block,
// so a test sees which frame wrote a slot.
inline std::vector<uint8_t> BlockBytes(protocol::RoundSeq round, protocol::SlotIndex index) {
  std::vector<uint8_t> bytes(kClientBlockLen);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(1 + round * 37 + index * 11 + i);
  return bytes;
}

struct ClientFixture {
  explicit ClientFixture(ClientConfig config = {})
      : region(std::make_shared<MemoryRegion>(kClientSlots, kClientBlockLen)),
        role("peer:9000", config, clock.AsClock(), log.AsSend()) {}

  std::vector<uint8_t> SlotBytes(protocol::SlotIndex index) {
    auto span = region->Block(index);
    return {span.begin(), span.end()};
  }
  bool SlotUntouched(protocol::SlotIndex index) {
    auto bytes = SlotBytes(index);
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
  }

  // Registers `keys` for `kv`, flushes, and returns the lookup's round.
  protocol::RoundSeq Probe(const std::string& kv, const std::vector<protocol::Key>& keys) {
    for (const auto& key : keys) role.RegisterLookup(kv, key);
    role.FlushPendingLookups();
    const auto lookups = log.All<protocol::Lookup>();
    for (auto it = lookups.rbegin(); it != lookups.rend(); ++it) {
      if (it->kv_request_id == kv) return it->round_seq;  // the latest carries the open round
    }
    FAIL("no lookup was sent for " << kv);
    return 0;
  }
  void Answer(const std::string& kv, protocol::RoundSeq round, const std::vector<protocol::Key>& keys,
              std::vector<bool> hits) {
    role.OnLookupResp(protocol::LookupResp{kv, keys, std::move(hits), round});
  }
  // Probes `keys` and has the producer answer all of them hit.
  protocol::RoundSeq ProbeHits(const std::string& kv, const std::vector<protocol::Key>& keys) {
    const auto round = Probe(kv, keys);
    Answer(kv, round, keys, std::vector<bool>(keys.size(), true));
    return round;
  }

  // Submits a load of `keys` into the region's slots `indexes`; returns its fetch.
  protocol::Fetch Load(JobId job, const std::string& kv, std::vector<protocol::Key> keys,
                       std::vector<protocol::SlotIndex> indexes) {
    Status s = role.RequestBlocks(job, kv, std::move(keys), std::move(indexes), region->Sink());
    REQUIRE(s.ok());
    return log.All<protocol::Fetch>().back();
  }
  // A PD load (no probe): keys 100+index.
  protocol::Fetch PdLoad(JobId job, const std::string& kv, std::vector<protocol::SlotIndex> indexes) {
    std::vector<protocol::Key> keys;
    for (auto index : indexes) keys.push_back(TestKey(100 + static_cast<int>(index)));
    return Load(job, kv, std::move(keys), std::move(indexes));
  }

  // The header half of a block_data frame.
  Status Header(const std::string& kv, protocol::RoundSeq round, std::vector<protocol::SlotIndex> indexes) {
    frame = protocol::BlockData{kv, round, std::move(indexes)};
    plan = BlockDataPlan{};
    return role.OnBlockDataHeader(frame, &plan);
  }
  // The payload half: writes each block where the plan says, as the daemon
  // would, then reports completion.
  void Payload() {
    if (!plan.discard) {
      REQUIRE(plan.targets.size() == frame.block_indexes.size());
      for (size_t i = 0; i < plan.targets.size(); ++i) {
        auto bytes = BlockBytes(frame.round_seq, frame.block_indexes[i]);
        REQUIRE(plan.targets[i].size() == bytes.size());
        std::copy(bytes.begin(), bytes.end(), plan.targets[i].begin());
      }
    }
    role.OnBlockDataComplete(frame);
  }
  // A whole block_data frame.
  Status Deliver(const std::string& kv, protocol::RoundSeq round, std::vector<protocol::SlotIndex> indexes) {
    Status s = Header(kv, round, std::move(indexes));
    if (s.ok()) Payload();
    return s;
  }
  Status Done(const std::string& kv, protocol::RoundSeq round, bool success = true) {
    return role.OnTransferDone(protocol::TransferDone{kv, success, round});
  }
  Status Ack(const std::string& kv, protocol::RoundSeq round) { return role.OnAbortAck(protocol::AbortAck{kv, round}); }

  FakeClock clock;
  FrameLog log;
  std::shared_ptr<MemoryRegion> region;
  ClientRole role;
  protocol::BlockData frame;
  BlockDataPlan plan;
};

// "job 1 r1 ok" / "job 1 r1 failed: reason": one string per result, so a
// failed check shows the whole result.
inline std::string ResultText(const JobResult& r) {
  return "job " + std::to_string(r.job_id) + " " + r.kv_request_id + (r.success ? " ok" : " failed") +
         (r.reason.empty() ? "" : ": " + r.reason);
}

// The only result a test expects, checked for its job and outcome.
inline JobResult SingleResult(ClientRole& role) {
  auto results = role.TakeResults();
  REQUIRE(results.size() == 1);
  return results[0];
}

}  // namespace kvpeer::session::testing
