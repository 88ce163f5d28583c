// fuzz_peer_session: the local daemon's operations, clock jumps and the
// writer, and the opcode dispatch (Harness::Step).
#include "fuzz/peer_session_harness.h"

namespace peer_session_fuzz {

// ---- local operations --------------------------------------------------------

std::string Harness::PickKv() {
  const uint8_t b = in_.Byte();
  if (b == 0xff) return std::string();                                    // invalid: empty
  if (b == 0xfe) return std::string(protocol::kMaxStringChars + 1, 'x');  // invalid: too long
  return std::string(kKvIds[b & 3]);
}

RoundKey Harness::PickClientRound() {
  const uint8_t b = in_.Byte();
  if (b < 0xe0 && !client_rounds_.empty()) return client_rounds_[client_rounds_.size() - 1 - b % client_rounds_.size()];
  return {std::string(kKvIds[b & 3]), static_cast<RoundSeq>((b >> 2) & 7)};
}

RoundKey Harness::PickServerRound() {
  const uint8_t b = in_.Byte();
  return {std::string(kKvIds[b & 3]), static_cast<RoundSeq>((b >> 2) & 7)};
}

std::vector<Key> Harness::PickKeys(size_t max) {
  std::vector<Key> keys(in_.Below(max + 1));
  for (Key& key : keys) key = PickKey();
  return keys;
}

void Harness::RequestBlocks() {
  const JobId job = next_job_++;
  const std::string kv = PickKv();
  const uint8_t mode = in_.Byte();
  std::vector<Key> keys;
  if ((mode & 1) != 0) {
    // Keys the engine saw as hits of the request's latest lookup.
    for (auto it = session_lookups_.rbegin(); it != session_lookups_.rend(); ++it) {
      if (it->kv_request_id != kv) continue;
      for (const Key& key : it->keys) {
        if (session_->RegisterLookup(kv, key) == session::ProbeAnswer::kHit) keys.push_back(key);
      }
      break;
    }
  }
  if (keys.empty()) keys = PickKeys(4);
  std::vector<SlotIndex> indexes(keys.size());
  const uint8_t base = in_.Byte();
  for (size_t i = 0; i < indexes.size(); ++i) {
    indexes[i] = (mode & 2) != 0 ? in_.Byte() & 15 : static_cast<SlotIndex>(base + i);  // may repeat
  }
  if ((mode & 0x40) != 0 && !indexes.empty()) indexes.back() = 0x80000000u;  // beyond the wire's range
  if ((mode & 0x80) != 0 && !indexes.empty()) indexes.pop_back();            // lengths differ
  auto sink = std::make_shared<Sink>(indexes);
  // Recorded first: a ready session sends the fetch from inside the call.
  loads_[job] = LoadModel{kv, indexes, sink, std::nullopt, {}, false, false};
  fetch_owed_.push_back(job);
  const Status status = session_->RequestBlocks(job, kv, std::move(keys), indexes, std::move(sink));
  if (!status.ok()) {
    // Refused: nothing was sent and no result is owed.
    Check(status.code() == Status::Code::kInvalid || status.code() == Status::Code::kUnavailable);
    Check(!fetch_owed_.empty() && fetch_owed_.back() == job);
    fetch_owed_.pop_back();
    loads_.erase(job);
    return;
  }
  Check(!closed());
  if (session_->ready()) Check(fetch_owed_.empty());  // sent at once, after any queued before the handshake
}

void Harness::AddSupply() {
  const JobId job = next_job_++;
  const std::string kv = PickKv();
  const uint8_t mode = in_.Byte();
  std::vector<Key> keys = PickKeys(4);
  std::vector<PinRef> pins;
  for (const Key& key : keys) pins.push_back(std::make_shared<FuzzPin>(region_, in_.Byte(), key, job));
  if ((mode & 1) != 0 && !pins.empty()) pins.back() = nullptr;  // not pinned: rejected
  if ((mode & 2) != 0) keys.push_back(KeyOf(mode >> 4));        // lengths differ: rejected
  stores_[job] = StoreModel{kv, false};
  session_->AddSupply(job, kv, std::move(keys), std::move(pins));
}

void Harness::ClockTick() {
  static constexpr std::chrono::milliseconds kJumps[] = {
      std::chrono::milliseconds(0),     std::chrono::milliseconds(1),    std::chrono::milliseconds(300),
      std::chrono::milliseconds(2000),  std::chrono::milliseconds(5000), std::chrono::milliseconds(10000),
      std::chrono::milliseconds(30000), std::chrono::milliseconds(61000)};
  now_ += kJumps[in_.Below(8)];
  const std::optional<Clock::time_point> deadline = session_->NextDeadline();
  const SessionState state_before = session_->state();
  sent_frames_ = 0;
  session_->OnTick();
  if (!deadline || now_ < *deadline) {
    // Nothing is due: the tick does nothing.
    Check(sent_frames_ == 0 && session_->state() == state_before);
  }
  // Whatever was due is done: the timer loop sleeps until a future time.
  if (const std::optional<Clock::time_point> next = session_->NextDeadline()) Check(*next > now_);
}

void Harness::Produce() {
  // The writer's contract: pull only when the previous data frame is written.
  for (const session::OutFrame& frame : wire_) {
    if (std::holds_alternative<protocol::BlockData>(frame.message)) return;
  }
  const bool has_data = session_->HasDataToSend();
  sent_frames_ = 0;
  const bool produced = session_->ProduceDataFrame();
  if (produced) Check(has_data && sent_frames_ > 0);
  if (!produced) Check(sent_frames_ == 0);
}

void Harness::Step(uint8_t op) {
  if (kTrace) std::fprintf(stderr, "op %d (state %d)\n", op % kOpCount, static_cast<int>(session_->state()));
  switch (op % kOpCount) {
    case kInLookup: {
      const RoundKey round = PickServerRound();
      Deliver(protocol::Lookup{round.first, PickKeys(4), round.second});
      break;
    }
    case kInLookupResp: {
      const RoundKey round = PickClientRound();
      const uint8_t hits = in_.Byte();
      protocol::LookupResp m{round.first, {}, {}, round.second};
      auto lookup = std::find_if(session_lookups_.rbegin(), session_lookups_.rend(), [&](const protocol::Lookup& l) {
        return l.kv_request_id == round.first && l.round_seq == round.second;
      });
      if (lookup != session_lookups_.rend() && (hits & 0x80) == 0) {
        m.keys = lookup->keys;
      } else {
        m.keys = PickKeys(4);
      }
      for (size_t i = 0; i < m.keys.size(); ++i) m.hits.push_back(((hits >> (i % 7)) & 1) == 0);
      Deliver(m);
      break;
    }
    case kInFetch: {
      const RoundKey round = PickServerRound();
      const uint8_t mode = in_.Byte();
      protocol::Fetch m{round.first, {}, {}, round.second};
      const size_t n = (mode & 7) % 5;  // 0 = the terminal empty fetch
      for (size_t i = 0; i < n; ++i) {
        m.keys.push_back(PickKey());
        m.block_indexes.push_back(in_.Byte() & 15);
      }
      Deliver(m);
      break;
    }
    case kInBlockData: {
      const RoundKey round = PickClientRound();
      protocol::BlockData m{round.first, round.second, {}};
      const size_t n = 1 + in_.Below(3);
      auto load = load_by_round_.find(round.second);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t b = in_.Byte();
        if (load != load_by_round_.end() && b < 0xf0 && !loads_.at(load->second).indexes.empty()) {
          const std::vector<SlotIndex>& indexes = loads_.at(load->second).indexes;
          m.block_indexes.push_back(indexes[b % indexes.size()]);
        } else {
          m.block_indexes.push_back(b & 15);
        }
      }
      if (ChecksumsOn()) m.xxh3 = PickChecksums(m.block_indexes.size());
      Deliver(m);
      break;
    }
    case kPayload:
      WritePayload();
      break;
    case kInTransferDone: {
      const RoundKey round = PickClientRound();
      Deliver(protocol::TransferDone{round.first, in_.Flag(), round.second});
      break;
    }
    case kInAbortFetch: {
      const RoundKey round = PickServerRound();
      Deliver(protocol::AbortFetch{round.first, round.second});
      break;
    }
    case kInAbortAck: {
      const RoundKey round = PickClientRound();
      Deliver(protocol::AbortAck{round.first, round.second});
      break;
    }
    case kInPing:
      Deliver(protocol::Ping{Token(in_.Byte())});
      break;
    case kInPong:
      Deliver(protocol::Pong{in_.Flag() && last_ping_nonce_ ? *last_ping_nonce_ : Token(in_.Byte())});
      break;
    case kInDisconnect:
      Deliver(protocol::Disconnect{in_.Flag() ? std::optional<std::string>(in_.Text(16)) : std::nullopt});
      break;
    case kInUnknown:
      Deliver(protocol::Unknown{"future_" + std::to_string(in_.Byte())});
      break;
    case kInConnect:
      Deliver(PeerConnect(in_.Byte()));
      break;
    case kInConnectAck:
      Deliver(PeerConnectAck(in_.Byte()));
      break;
    case kInRawHeader: {
      const uint64_t payload_len = (in_.Byte() & 3) * kBlockLen;
      const std::string header = in_.Text(160);
      Message decoded;
      if (protocol::DecodeHeader(header, payload_len, protocol::DecodeContext{kBlockLen}, &decoded).ok()) {
        DeliverDecoded(decoded);
      }
      break;
    }
    case kRegisterLookup: {
      const std::string kv = PickKv();
      const size_t n = 1 + in_.Below(3);
      for (size_t i = 0; i < n; ++i) {
        const session::ProbeAnswer answer = session_->RegisterLookup(kv, PickKey());
        if (closed()) Check(answer == session::ProbeAnswer::kMiss);
      }
      break;
    }
    case kFlush: {
      const size_t sent = session_->FlushPendingLookups();
      if (closed()) Check(sent == 0);
      break;
    }
    case kRequestBlocks:
      RequestBlocks();
      break;
    case kAddSupply:
      AddSupply();
      break;
    case kFinish:
      session_->Finish(PickKv());
      break;
    case kClockTick:
      ClockTick();
      break;
    case kProduce:
      Produce();
      break;
    case kWrite:
      for (size_t n = 1 + in_.Below(4); n > 0 && !wire_.empty(); --n) wire_.pop_front();
      break;
    case kPublish: {
      const Key key = PickKey();
      const uint8_t b = in_.Byte();
      if ((b & 0x80) != 0) {
        index_.published.erase(key);
      } else {
        index_.published[key] = b % kRegionBlocks;
      }
      break;
    }
    case kClose: {
      // The daemon's own reasons: plain text (peer bytes never reach them unquoted).
      std::string reason = in_.Text(8);
      for (char& c : reason) c = static_cast<char>('a' + static_cast<unsigned char>(c) % 26);
      const bool notify = in_.Flag();
      session_->Close(session::CloseCause::kOperator, reason, notify);
      Check(closed());
      break;
    }
    default:
      break;
  }
}

}  // namespace peer_session_fuzz
