// Helpers for the PeerSession tests: deterministic tokens, a node (region,
// index, session), a lone session whose peer the test plays, and a pair of
// nodes joined by a SessionPipe.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "session/peer_session.h"
#include "tests/session/fakes.h"
#include "tests/session/session_pipe.h"

namespace kvpeer::session::testing {

inline constexpr uint64_t kBlockLen = 64;
inline constexpr uint32_t kNumBlocks = 64;

// 32 hex digits from a counter: deterministic and never all zeros.
inline std::string Token(uint64_t n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", 0xfeedull, static_cast<unsigned long long>(n));
  return buf;
}

inline std::function<std::string()> TokenSource(uint64_t first) {
  auto next = std::make_shared<uint64_t>(first);
  return [next] { return Token((*next)++); };
}

inline SessionConfig MakeConfig(const std::string& local_id, uint64_t epoch_seed) {
  SessionConfig config;
  config.local_id = local_id;
  config.block_len = kBlockLen;
  config.config_fingerprint = "fp-1";
  config.hash_seed = "seed-0";
  config.epoch = Token(epoch_seed);
  config.random_token = TokenSource(epoch_seed * 1000 + 1);
  return config;
}

struct TestNode {
  TestNode(std::string node_id, uint64_t epoch_seed)
      : id(std::move(node_id)),
        config(MakeConfig(id, epoch_seed)),
        region(std::make_shared<MemoryRegion>(kNumBlocks, kBlockLen)),
        index(region) {}

  std::string id;
  SessionConfig config;
  std::shared_ptr<MemoryRegion> region;
  MemoryIndex index;
  std::unique_ptr<PeerSession> session;
};

// One session whose peer is played by the test, frame by frame.
struct LoneSession {
  explicit LoneSession(std::string expected_peer = "node-b:7000") : node("node-a:7000", 1) {
    Make(std::move(expected_peer));
  }

  void Make(std::string expected_peer) {
    log.Clear();
    session =
        std::make_unique<PeerSession>(node.config, clock.AsClock(), log.AsSend(), node.index, std::move(expected_peer));
    session->Start();
  }

  protocol::Connect PeerConnect() const {
    protocol::Connect c;
    c.peer_id = "node-b:7000";
    c.epoch = Token(2);
    c.block_len = kBlockLen;
    c.config_fingerprint = "fp-1";
    c.hash_seed = "seed-0";
    c.nonce = Token(77);
    return c;
  }

  protocol::ConnectAck PeerAck() const {
    protocol::ConnectAck ack;
    ack.peer_id = "node-b:7000";
    ack.epoch = Token(2);
    return ack;
  }

  const protocol::Connect& OurConnect() const { return std::get<protocol::Connect>(log.frames.at(0).message); }

  void MakeReady() {
    REQUIRE(session->OnMessage(PeerConnect()).ok());
    REQUIRE(session->OnMessage(PeerAck()).ok());
    REQUIRE(session->ready());
  }

  const protocol::Message& Last() const { return log.frames.back().message; }
  std::string LastDisconnectReason() const {
    const auto* d = std::get_if<protocol::Disconnect>(&Last());
    return d && d->reason ? *d->reason : "<no disconnect>";
  }

  FakeClock clock;
  FrameLog log;
  TestNode node;
  std::unique_ptr<PeerSession> session;
};

// A dials B. Sessions are built by Connect(), so tests can change the
// configs first.
struct SessionPair {
  SessionPair() : a("node-a:7000", 1), b("node-b:7000", 2), pipe(kBlockLen) {}

  void Connect() {
    MakeSessions();
    a.session->Start();
    b.session->Start();
  }

  // The sessions from the configs, attached to the pipe, not started.
  void MakeSessions() {
    a.session = std::make_unique<PeerSession>(a.config, clock.AsClock(), pipe.SendFrom(SessionPipe::kA), a.index, b.id);
    b.session = std::make_unique<PeerSession>(b.config, clock.AsClock(), pipe.SendFrom(SessionPipe::kB), b.index);
    pipe.Attach(SessionPipe::kA, a.session.get());
    pipe.Attach(SessionPipe::kB, b.session.get());
  }

  void ConnectAndPump() {
    Connect();
    pipe.Pump();
  }

  void Tick() {
    a.session->OnTick();
    b.session->OnTick();
  }

  FakeClock clock;
  TestNode a;
  TestNode b;
  SessionPipe pipe;
};

}  // namespace kvpeer::session::testing
