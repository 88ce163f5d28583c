// fuzz_peer_session: the harness's setup, what it sees the session send,
// and the results it checks.
#include "fuzz/peer_session_harness.h"

namespace peer_session_fuzz {

// ---- setup -------------------------------------------------------------------

void Harness::Setup() {
  const uint8_t mode = in_.Byte();
  dialled_ = (mode & 1) != 0;
  psk_ = (mode & 2) != 0;
  session::SessionConfig config;
  config.local_id = std::string(kOwnId);
  config.block_len = kBlockLen;
  config.config_fingerprint = std::string(kFingerprint);
  config.hash_seed = std::string(kHashSeed);
  config.epoch = std::string(kOwnEpoch);
  if (psk_) config.psk = std::string(kPsk);
  config.liveness_timeout = (mode & 0x10) != 0 ? std::chrono::seconds(10) : std::chrono::seconds(600);
  config.server.max_frame_payload = kBlockLen * (1 + ((mode >> 5) & 3));
  max_rounds_ = (mode & 0x80) != 0 ? 3 : 0;
  config.server.max_rounds = max_rounds_;
  auto counter = std::make_shared<uint64_t>(1);
  config.random_token = [counter] { return Token((*counter)++); };
  // Offered always; on once a connect of the peer lists it too (variant 9).
  config.features = protocol::SupportedFeatures();
  session_ = std::make_unique<PeerSession>(
      std::move(config), [this] { return now_; }, [this](session::OutFrame f) { OnSent(std::move(f)); }, index_,
      dialled_ ? std::string(kPeerId) : std::string());
  session_->Start();
  Check(own_connect_.has_value());
  // Handshake style: 0 complete, 1 connect only, 2 ack before connect, 3 none.
  switch ((mode >> 2) & 3) {
    case 0:
      Deliver(PeerConnect(0));
      Deliver(PeerConnectAck(0));
      Check(session_->ready());
      break;
    case 1:
      Deliver(PeerConnect(0));
      break;
    case 2:
      Deliver(PeerConnectAck(0));
      Check(closed());
      break;
    default:
      break;
  }
  Collect();
}

// variant 0 is the valid connect; others get one thing wrong.
protocol::Connect Harness::PeerConnect(uint8_t variant) const {
  protocol::Connect c;
  c.peer_id = std::string(kPeerId);
  c.epoch = std::string(kPeerEpoch);
  c.block_len = kBlockLen;
  c.config_fingerprint = std::string(kFingerprint);
  c.hash_seed = std::string(kHashSeed);
  c.nonce = std::string(kPeerNonce);
  switch (variant % 10) {
    case 1:
      c.block_len = kBlockLen * 2;
      break;
    case 2:
      c.config_fingerprint = "other";
      break;
    case 3:
      c.hash_seed = "other";
      break;
    case 4:
      c.epoch = std::string(kOwnEpoch);
      break;
    case 5:
      c.peer_id = "other:1";
      break;  // a mismatch only when dialled
    case 6:
      c.wire_minor = 7;
      break;  // compatible
    case 7:
      c.wire_major = 2;
      break;
    case 8:
      c.config_fingerprint = std::string(300, 'x');
      break;
    case 9:
      c.features = {std::string(protocol::kFeatureXxh3), "unknown-feature"};
      break;  // valid: checksums on
    default:
      break;
  }
  return c;
}

// The proof the peer must send under wire 1.1 section 5: made in the peer's
// role (acceptor when we dialled), over both nonces and both ids.
std::string Harness::PeerProof(std::string_view psk) const {
  const std::string nonce = peer_connect_ ? peer_connect_->nonce : std::string(kPeerNonce);
  const std::string id = peer_connect_ ? peer_connect_->peer_id : std::string(kPeerId);
  return session::PskProof(psk, {dialled_ ? session::ProofRole::kAcceptor : session::ProofRole::kDialer,
                                 own_connect_->nonce, nonce, id, kOwnId});
}

protocol::ConnectAck Harness::PeerConnectAck(uint8_t variant) const {
  // The ack of the connect the session accepted (or of the usual one).
  protocol::ConnectAck a;
  a.peer_id = peer_connect_ ? peer_connect_->peer_id : std::string(kPeerId);
  a.epoch = peer_connect_ ? peer_connect_->epoch : std::string(kPeerEpoch);
  if (psk_) a.proof = PeerProof(kPsk);
  switch (variant % 7) {
    case 1:
      a.proof.reset();
      break;
    case 2:
      a.proof = std::string(64, 'a');
      break;
    case 3:
      a.epoch = Token(77);
      break;
    case 4:
      a.peer_id = "other:1";
      break;
    case 5:
      a.wire_major = 3;
      break;
    case 6:
      a.proof = PeerProof("wrong key");
      break;
    default:
      break;
  }
  return a;
}

// ---- outbound frames ---------------------------------------------------------

void Harness::OnSent(session::OutFrame frame) {
  Check(session_ != nullptr && !closed());  // nothing leaves a closed session
  if (kTrace) std::fprintf(stderr, "  sent %s\n", protocol::EncodeHeader(frame.message).substr(0, 200).c_str());
  ++sent_frames_;
  const bool role = !std::holds_alternative<protocol::Connect>(frame.message) &&
                    !std::holds_alternative<protocol::ConnectAck>(frame.message) &&
                    !std::holds_alternative<protocol::Ping>(frame.message) &&
                    !std::holds_alternative<protocol::Pong>(frame.message) &&
                    !std::holds_alternative<protocol::Disconnect>(frame.message);
  if (role) Check(session_->ready());
  // The peer's decoder accepts every frame we send.
  for (const PinRef& pin : frame.blocks) Check(pin && pin->bytes().size() == kBlockLen);
  Message decoded;
  Check(protocol::DecodeHeader(protocol::EncodeHeader(frame.message), frame.blocks.size() * kBlockLen,
                               protocol::DecodeContext{kBlockLen}, &decoded)
            .ok());
  Check(decoded == frame.message);
  Observe(frame);
  wire_.push_back(std::move(frame));
}

void Harness::Observe(const session::OutFrame& frame) {
  const Message& message = frame.message;
  if (const auto* m = std::get_if<protocol::Connect>(&message)) {
    Check(!own_connect_);  // one connect per session
    own_connect_ = *m;
  } else if (std::holds_alternative<protocol::ConnectAck>(message)) {
    ++sent_connect_acks_;
  } else if (const auto* m = std::get_if<protocol::Ping>(&message)) {
    last_ping_nonce_ = m->nonce;
  } else if (const auto* m = std::get_if<protocol::Pong>(&message)) {
    sent_pong_ = *m;
  } else if (const auto* m = std::get_if<protocol::Lookup>(&message)) {
    // A lookup travels in an open round, never in one a fetch closed.
    Check(!fetch_rounds_.contains(m->round_seq));
    Remember(session_lookups_, *m);
    Remember(client_rounds_, RoundKey{m->kv_request_id, m->round_seq});
  } else if (const auto* m = std::get_if<protocol::Fetch>(&message)) {
    if (m->keys.empty()) return;  // the terminal empty fetch
    Check(!fetch_owed_.empty());
    const JobId job = fetch_owed_.front();
    fetch_owed_.pop_front();
    LoadModel& load = loads_.at(job);
    Check(load.kv == m->kv_request_id && load.indexes == m->block_indexes);
    Check(fetch_rounds_.insert(m->round_seq).second);  // round tokens are never reused
    load.round = m->round_seq;
    load_by_round_[m->round_seq] = job;
    Remember(client_rounds_, RoundKey{m->kv_request_id, m->round_seq});
  } else if (const auto* m = std::get_if<protocol::AbortFetch>(&message)) {
    auto it = load_by_round_.find(m->round_seq);
    Check(it != load_by_round_.end());
    LoadModel& load = loads_.at(it->second);
    Check(load.kv == m->kv_request_id && !load.aborted);  // one abort per round
    load.aborted = true;
  } else if (const auto* m = std::get_if<protocol::LookupResp>(&message)) {
    sent_lookup_resp_ = *m;
  } else if (const auto* m = std::get_if<protocol::BlockData>(&message)) {
    ServedRound& round = served_[{m->kv_request_id, m->round_seq}];
    Check(round.demand);
    Check(frame.blocks.size() == m->block_indexes.size());
    for (size_t i = 0; i < frame.blocks.size(); ++i) {
      const auto* pin = dynamic_cast<const FuzzPin*>(frame.blocks[i].get());
      Check(pin != nullptr);
      auto owed = round.owed.find({m->block_indexes[i], pin->key()});
      Check(owed != round.owed.end());
      round.owed.erase(owed);
      if (pin->job()) Check(!stores_.at(*pin->job()).has_result);
    }
  } else if (const auto* m = std::get_if<protocol::TransferDone>(&message)) {
    ServedRound& round = served_[{m->kv_request_id, m->round_seq}];
    Check(round.demand);
    if (m->success) Check(round.owed.empty());
    round.demand = false;
    round.owed.clear();
  } else if (const auto* m = std::get_if<protocol::AbortAck>(&message)) {
    ++sent_abort_acks_;
    const RoundKey key{m->kv_request_id, m->round_seq};
    Check(acked_.insert(key).second);
    served_[key] = ServedRound{};
  }
}

// ---- results -------------------------------------------------------------------

void Harness::Collect() {
  if (closed() && !closed_seen_) {
    // The daemon closes the socket: unwritten frames are dropped, and the
    // reader writes no more payload.
    closed_seen_ = true;
    wire_.clear();
    open_frame_.reset();
    fetch_owed_.clear();
  }
  session::SessionResults results = session_->TakeResults();
  if (kTrace) {
    for (const auto* list : {&results.loads, &results.stores}) {
      for (const session::JobResult& r : *list) {
        std::fprintf(stderr, "  %s result job %llu %s: %s\n", list == &results.loads ? "load" : "store",
                     static_cast<unsigned long long>(r.job_id), r.success ? "ok" : "failed", r.reason.c_str());
      }
    }
  }
  for (const session::JobResult& result : results.loads) {
    auto it = loads_.find(result.job_id);
    Check(it != loads_.end() && !it->second.has_result && it->second.kv == result.kv_request_id);
    LoadModel& load = it->second;
    load.has_result = true;
    if (result.success) {
      // Every destination arrived, each once, and the round was not aborted.
      Check(!load.aborted && load.round.has_value());
      Check(load.received == std::set<SlotIndex>(load.indexes.begin(), load.indexes.end()));
      Check(load.received.size() == load.indexes.size());
    } else {
      Check(!result.reason.empty());
    }
  }
  // A session closed in favour of another connection hands back, without
  // a result, the loads the peer never served (session/unserved_work.h):
  // the daemon owes their one result, so the model counts them as ended.
  for (const session::UnservedLoad& handed : results.unserved.loads) {
    auto it = loads_.find(handed.job_id);
    Check(it != loads_.end() && !it->second.has_result && it->second.kv == handed.kv_request_id);
    Check(session_->hands_back_work() && it->second.received.empty() && !it->second.aborted);
    Check(handed.block_indexes == it->second.indexes);
    it->second.has_result = true;
  }
  results.unserved = {};  // lets go of the sinks, as the daemon does once it asked again
  for (const session::JobResult& result : results.stores) {
    auto it = stores_.find(result.job_id);
    Check(it != stores_.end() && !it->second.has_result && it->second.kv == result.kv_request_id);
    it->second.has_result = true;
    if (!result.success) Check(!result.reason.empty());
    // The result frees the job's slots: no unwritten frame may read them.
    for (const session::OutFrame& frame : wire_) {
      for (const PinRef& block : frame.blocks) {
        const auto* pin = dynamic_cast<const FuzzPin*>(block.get());
        Check(pin != nullptr && pin->job() != result.job_id);
      }
    }
  }
  for (const std::string& kv : results.new_fetch_ids) Check(fetched_kvs_.contains(kv));
  if (max_rounds_ != 0) Check(session_->RoundsOpen() <= max_rounds_);
  if (closed_seen_) CheckClosed();
}

void Harness::CheckClosed() {
  for (const auto& [job, load] : loads_) {
    Check(load.has_result);
    Check(load.sink.use_count() == 1);  // the session let go of every destination
  }
  for (const auto& [job, store] : stores_) Check(store.has_result);
  Check(region_.live_pins == 0);
  Check(session_->LoadsInFlight() == 0 && session_->RoundsServing() == 0);
  Check(!session_->HasDataToSend() && !session_->NextDeadline());
}

void Harness::Finally() {
  if (!closed()) {
    // End of input: the daemon's reader saw EOF.
    session_->Close(session::CloseCause::kConnectionLost, "peer closed the connection", /*notify_peer=*/false);
  }
  Collect();
  // A closed session refuses new work; a late store still gets its result.
  Check(!session_->ProduceDataFrame());
  Check(session_->RegisterLookup("r0", KeyOf(0)) == session::ProbeAnswer::kMiss);
  Check(session_->FlushPendingLookups() == 0);
  Check(!session_->RequestBlocks(next_job_++, "r0", {KeyOf(0)}, {0}, std::make_shared<Sink>(std::vector<SlotIndex>{0}))
             .ok());
  const JobId late = next_job_++;
  stores_[late] = StoreModel{"r0", false};
  session_->AddSupply(late, "r0", {KeyOf(1)}, {std::make_shared<FuzzPin>(region_, 1, KeyOf(1), late)});
  Collect();
  Check(wire_.empty());
}

void Harness::Run() {
  Setup();
  for (size_t ops = 0; ops < kMaxOps && !in_.done(); ++ops) {
    Step(in_.Byte());
    Collect();
  }
  Finally();
}

}  // namespace peer_session_fuzz
