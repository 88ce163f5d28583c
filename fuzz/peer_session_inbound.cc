// fuzz_peer_session: the frames the fuzzed peer sends, each through the
// wire codec first.
#include "fuzz/peer_session_harness.h"

namespace peer_session_fuzz {

// ---- inbound frames ----------------------------------------------------------

// As the daemon's reader would: only what the wire decoder accepts reaches
// the session.
void Harness::Deliver(const Message& message) {
  const bool block_data = std::holds_alternative<protocol::BlockData>(message);
  Message decoded;
  const uint64_t payload_len = block_data ? std::get<protocol::BlockData>(message).block_indexes.size() * kBlockLen : 0;
  const std::string header = protocol::EncodeHeader(message);
  if (!protocol::DecodeHeader(header, payload_len, protocol::DecodeContext{kBlockLen}, &decoded).ok()) return;
  // The daemon's decoder refuses a frame beyond the session's inbound limits
  // (wire 1.1 section 2: before ready no payload, 64 KiB of header) from its
  // prefix; nothing of it reaches the session, which closes.
  if (!closed() &&
      (header.size() > session_->MaxInboundHeaderLen() || payload_len > session_->MaxInboundPayloadLen())) {
    session_->Close(session::CloseCause::kMalformedFrame, "frame beyond the inbound limits", true);
    return;
  }
  DeliverDecoded(decoded);
}

void Harness::DeliverDecoded(const Message& message) {
  if (closed() || open_frame_) return;  // the reader stopped, or is inside a payload
  sent_frames_ = 0;
  sent_lookup_resp_.reset();
  sent_pong_.reset();
  sent_abort_acks_ = 0;
  sent_connect_acks_ = 0;
  std::visit([this](const auto& m) { Inbound(m); }, message);
}

Status Harness::Dispatch(const Message& message, bool role) {
  const bool was_ready = session_->ready();
  const Status status = session_->OnMessage(message);
  if (kTrace) {
    std::fprintf(stderr, "  received %s -> %s\n", protocol::EncodeHeader(message).substr(0, 200).c_str(),
                 status.ok() ? "ok" : status.message().c_str());
  }
  Check(status.ok() == !closed());
  Check(status.code() != Status::Code::kInternal);
  if (role && !was_ready) Check(closed());
  return status;
}

void Harness::Inbound(const protocol::Connect& m) {
  const bool first = !peer_connect_;
  const bool acceptable = m.wire_major == protocol::kWireMajor && m.block_len == kBlockLen &&
                          m.config_fingerprint == kFingerprint && m.hash_seed == kHashSeed && m.epoch != kOwnEpoch &&
                          (!dialled_ || m.peer_id == kPeerId) &&
                          (!psk_ || m.wire_minor >= protocol::kMinWireMinorWithPsk);
  const Status status = Dispatch(m, false);
  if (first && acceptable) {
    // Wire 1.1 section 4: a PSK acceptor acks only after the dialer's proof.
    const size_t acks_now = psk_ && !dialled_ ? 0 : 1;
    Check(status.ok() && sent_connect_acks_ == acks_now);
    peer_connect_ = m;
  } else {
    Check(!status.ok() && sent_connect_acks_ == 0);  // a second connect is a violation too
  }
}

void Harness::Inbound(const protocol::ConnectAck& m) {
  const bool was_ready = session_->ready();
  const Status status = Dispatch(m, false);
  if (!peer_connect_) Check(!status.ok());  // an ack must follow the connect
  if (was_ready) Check(!status.ok());       // a second connect_ack is a violation (1.1)
  // A PSK acceptor answers the dialer's accepted proof with its own ack.
  if (status.ok() && psk_ && !dialled_) Check(sent_connect_acks_ == 1);
  if (status.ok() && !was_ready) {
    // Accepted: the session is ready, and accepted only an ack that repeats
    // the connect's identity and carries the right proof.
    Check(session_->ready());
    const std::string& prover = peer_connect_->peer_id;
    if (psk_) Check(m.proof == PeerProof(kPsk));
    Check(m.peer_id == prover && m.epoch == peer_connect_->epoch);
  }
}

// Dispatch checks every outcome against the session's state; where the
// outcome asks nothing more of the harness, it is dropped on purpose.
void Harness::Inbound(const protocol::Disconnect& m) {
  Dispatch(m, false).IgnoreError();
  Check(closed());
}

void Harness::Inbound(const protocol::Ping& m) {
  if (Dispatch(m, false).ok()) Check(sent_pong_ && sent_pong_->nonce == m.nonce);
}

void Harness::Inbound(const protocol::Pong& m) { Dispatch(m, false).IgnoreError(); }

void Harness::Inbound(const protocol::Unknown& m) {
  const uint64_t before = session_->counters().unknown_types;
  // Before ready an unknown type is a violation (wire 1.1 section 2), like a role message.
  if (Dispatch(m, /*role=*/true).ok()) Check(session_->counters().unknown_types == before + 1);
}

void Harness::Inbound(const protocol::Lookup& m) {
  const uint64_t refused_before = session_->RoundsRefused();
  if (!Dispatch(m, true).ok()) return;
  if (m.keys.empty()) {
    Check(!sent_lookup_resp_);
    return;
  }
  // Answered at once, key for key; a published key is a hit, unless the
  // round limit refused the lookup, which answers every key miss.
  Check(sent_lookup_resp_ && sent_lookup_resp_->kv_request_id == m.kv_request_id &&
        sent_lookup_resp_->round_seq == m.round_seq && sent_lookup_resp_->keys == m.keys &&
        sent_lookup_resp_->hits.size() == m.keys.size());
  const bool refused = session_->RoundsRefused() != refused_before;
  if (refused) Check(max_rounds_ != 0);
  for (size_t i = 0; i < m.keys.size(); ++i) {
    if (refused)
      Check(!sent_lookup_resp_->hits[i]);
    else if (index_.published.contains(m.keys[i]))
      Check(sent_lookup_resp_->hits[i]);
  }
}

void Harness::Inbound(const protocol::LookupResp& m) { Dispatch(m, true).IgnoreError(); }

void Harness::Inbound(const protocol::Fetch& m) {
  const RoundKey key{m.kv_request_id, m.round_seq};
  bool duplicate = false;
  if (session_->ready()) {
    if (m.keys.empty()) {
      // The terminal empty fetch clears the request's tombstones.
      std::erase_if(acked_, [&](const RoundKey& k) { return k.first == m.kv_request_id; });
    } else if (!acked_.contains(key)) {
      ServedRound& round = served_[key];
      duplicate = round.demand;
      if (!duplicate) {
        round.demand = true;
        round.owed.clear();
        for (size_t i = 0; i < m.keys.size(); ++i) round.owed.emplace(m.block_indexes[i], m.keys[i]);
        fetched_kvs_.insert(m.kv_request_id);
      }
    }
  }
  const Status status = Dispatch(m, true);
  if (duplicate) Check(!status.ok());
}

void Harness::Inbound(const protocol::AbortFetch& m) {
  const RoundKey key{m.kv_request_id, m.round_seq};
  const bool first = !acked_.contains(key);
  if (!Dispatch(m, true).ok()) return;
  Check(sent_abort_acks_ == (first ? 1u : 0u));
}

void Harness::Inbound(const protocol::TransferDone& m) { Dispatch(m, true).IgnoreError(); }

void Harness::Inbound(const protocol::AbortAck& m) { Dispatch(m, true).IgnoreError(); }

void Harness::Inbound(const protocol::BlockData& m) {
  const bool was_ready = session_->ready();
  session::BlockDataPlan plan;
  plan.targets.push_back({});  // stale content the session must replace
  const Status status = session_->OnBlockDataHeader(m, &plan);
  if (kTrace) {
    std::fprintf(stderr, "  received %s -> %s%s\n", protocol::EncodeHeader(m).c_str(),
                 status.ok() ? "ok" : status.message().c_str(), plan.discard ? " (discard)" : "");
  }
  Check(status.ok() == !closed());
  Check(status.code() != Status::Code::kInternal);
  if (!was_ready) Check(closed());
  if (!status.ok()) return;
  OpenFrame frame{m, std::move(plan), std::nullopt, m.block_indexes.size() * kBlockLen, 0};
  auto by_round = load_by_round_.find(m.round_seq);
  Check(by_round != load_by_round_.end());  // only a load's round is accepted
  LoadModel& load = loads_.at(by_round->second);
  Check(load.kv == m.kv_request_id);
  if (frame.plan.discard) {
    Check(frame.plan.targets.empty() && load.aborted);
  } else {
    Check(!load.aborted && !load.has_result);
    Check(frame.plan.targets.size() == m.block_indexes.size());
    std::set<SlotIndex> in_frame;
    for (size_t i = 0; i < m.block_indexes.size(); ++i) {
      const SlotIndex index = m.block_indexes[i];
      Check(std::find(load.indexes.begin(), load.indexes.end(), index) != load.indexes.end());
      Check(!load.received.contains(index) && in_frame.insert(index).second);
      Check(frame.plan.targets[i].size() == kBlockLen && frame.plan.targets[i].data() == load.sink->Address(index));
    }
    frame.job = by_round->second;
  }
  open_frame_ = std::move(frame);
}

// Writes the next piece of the open frame's payload into its targets (or
// drops it, for a discarded frame); the last piece completes the frame.
void Harness::WritePayload() {
  if (!open_frame_) return;
  OpenFrame& frame = *open_frame_;
  const uint8_t b = in_.Byte();
  const size_t piece = b == 0 ? frame.total - frame.written : std::min<size_t>(b, frame.total - frame.written);
  if (frame.job) {
    // No byte lands in a load's slots once its result is out.
    Check(!loads_.at(*frame.job).has_result);
    size_t offset = frame.written;
    for (size_t left = piece; left > 0;) {
      std::span<uint8_t> target = frame.plan.targets[offset / kBlockLen];
      const size_t at = offset % kBlockLen;
      const size_t n = std::min(left, kBlockLen - at);
      std::fill_n(target.data() + at, n, static_cast<uint8_t>(b | 1));
      offset += n;
      left -= n;
    }
  }
  frame.written += piece;
  if (frame.written < frame.total) return;
  const OpenFrame done = std::move(frame);
  open_frame_.reset();
  session_->OnBlockDataComplete(done.header);
  if (done.job) {
    LoadModel& load = loads_.at(*done.job);
    load.received.insert(done.header.block_indexes.begin(), done.header.block_indexes.end());
  }
}

bool Harness::ChecksumsOn() const {
  const std::vector<std::string>& on = session_->features_on();
  return std::find(on.begin(), on.end(), protocol::kFeatureXxh3) != on.end();
}

// block_data.xxh3 while the feature is on (wire 1.1 section 7): absent or
// of the wrong length (violations), the checksum of a block that
// WritePayload fills in one piece (byte 0x01: those loads can succeed), or
// values from the input (mismatches: the load fails, the session goes on).
protocol::BlockChecksums Harness::PickChecksums(size_t blocks) {
  const uint8_t mode = in_.Byte();
  std::vector<uint64_t> values;
  switch (mode % 4) {
    case 0:
      return {};
    case 1:
      values.resize(blocks + 1 + (mode >> 7));
      break;
    case 2: {
      const std::vector<uint8_t> filled(kBlockLen, 0x01);
      values.assign(blocks, protocol::BlockChecksum(std::as_bytes(std::span(filled))));
      break;
    }
    default:
      for (size_t i = 0; i < blocks; ++i) values.push_back(uint64_t{in_.Byte()} << 56 | in_.Byte());
      break;
  }
  return protocol::BlockChecksums::Of(std::move(values));
}

}  // namespace peer_session_fuzz
