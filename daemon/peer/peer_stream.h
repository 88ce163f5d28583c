// PeerStream: the byte stream of one peer connection, plain TCP or TLS
// (--tls-cert, --tls-key, --tls-ca), behind one small interface so that
// PeerConnection does not care which.
//
// TLS is TLS 1.3 only, with mutual certificate verification: each side
// presents its certificate and requires one from the peer, signed by the
// configured CA (verify_peer | verify_fail_if_no_peer_cert). The dialling
// side also checks, during the TLS handshake, that the certificate names the
// host it dialled (DNS or IP subject alternative name), like HTTPS. Both
// sides then check it against the host of the peer_id the peer's `connect`
// claims (IdentityMismatch, wire-protocol.md section 5): a certificate from
// the cluster's CA does not let its holder speak as another node.
//
// Over TLS, block payloads pass through user space to be encrypted or
// decrypted; PeerConnection then moves them between the engines' regions
// and bounce buffers through the regions' descriptors (OutgoingFrame,
// ShmRegion::ReadMapped/WriteMapped), never through the mappings, so a
// truncated region cannot raise SIGBUS in the daemon.
//
// Thread-safety: none; used on the daemon's one io_context. At most one
// read and one write may be in flight at a time (as Asio's ssl::stream
// requires), which PeerConnection's one reader and one writer guarantee.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "base/status_or.h"

namespace kvpeer::daemon {

// The files of --tls-cert, --tls-key, --tls-ca.
struct TlsFiles {
  std::string cert;  // PEM certificate chain of this node
  std::string key;   // PEM private key of that certificate
  std::string ca;    // PEM CA certificate(s) that peers' certificates must chain to
};

// A context for both roles (dialling and accepting), TLS 1.3 only, with
// mutual verification. Fails naming the file and OpenSSL's reason when a
// file cannot be loaded or the key does not match.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsFiles& files);

class PeerStream {
 public:
  using Tls = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

  // Plain TCP (implicit, so a tcp::socket is a PeerStream).
  PeerStream(boost::asio::ip::tcp::socket socket)  // NOLINT(google-explicit-constructor)
      : plain_(std::move(socket)) {}
  // TLS over `socket`; `context` must outlive the stream.
  PeerStream(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context)
      : plain_(socket.get_executor()), tls_(std::make_unique<Tls>(std::move(socket), context)) {}

  PeerStream(PeerStream&&) = default;
  PeerStream& operator=(PeerStream&&) = delete;

  // What differs between plain TCP and TLS is asked here, by what it means
  // to the connection, rather than "is this TLS?":
  //
  // The kernel moves payload bytes straight between the socket and memory
  // (plain TCP), so a read or write may target an engine's mapping, and a
  // mapping pulled away shows up as EFAULT (bad_address). False under TLS,
  // where user space decrypts and encrypts: payload goes through buffers.
  bool zero_copy() const { return tls_ == nullptr; }
  // The stream proves who the peer is (a verified certificate), so the
  // session must check the peer_id it claims (IdentityMismatch).
  bool authenticates_peer() const { return tls_ != nullptr; }
  // Handshake must run before any frame: a TLS stream not yet shaken hands.
  bool needs_handshake() const { return tls_ != nullptr && !handshake_done_; }
  // The TCP socket underneath: connect, options, addresses, close.
  boost::asio::ip::tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }
  const boost::asio::ip::tcp::socket& socket() const { return tls_ ? tls_->next_layer() : plain_; }

  // Dialling side: the peer's certificate must name `host`. Call before
  // Handshake; no-op for plain TCP. Fails only when OpenSSL refuses the check.
  [[nodiscard]] Status VerifyPeerName(const std::string& host);
  // After the TLS handshake: ok when the peer's certificate names `host`
  // (an IP literal against its IP addresses, a DNS name against its DNS
  // names, no partial wildcards), else a kViolation saying what it does not
  // name. Plain TCP proves nothing and is never asked.
  Status IdentityMismatch(const std::string& host) const;
  // The TLS handshake in `role`; completes at once for plain TCP.
  boost::asio::awaitable<void> Handshake(boost::asio::ssl::stream_base::handshake_type role,
                                         boost::system::error_code& ec);

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return plain_.async_read_some(buffers, std::forward<Token>(token));
  }

  // Writes some of `buffers`: the bytes written, or 0 when the socket was
  // full and has become writable again (ask again). Plain TCP writes without
  // waiting and waits for writability only after the kernel said "would
  // block". Asio's own async write would not do: after a write that failed
  // with EFAULT it waits for a writability edge that the kernel never sends
  // (that failure sets no "no space" mark), and the connection stalls. A
  // would-block sets the mark, so its edge comes, and on the one-threaded
  // io_context it cannot come before the wait is queued. A plain write that
  // did not block still passes through the io_context before returning, so
  // a writer with data to send never keeps the reader and the timers from
  // running.
  boost::asio::awaitable<size_t> WriteSome(const std::vector<boost::asio::const_buffer>& buffers,
                                           boost::system::error_code& ec);

  // While a payload streams in, the reader wakes only once `payload_remaining`
  // bytes (at most 128 KiB, at least 1) have arrived (SO_RCVLOWAT): fewer
  // wake-ups and larger copies per read, like a blocking recv(MSG_WAITALL),
  // and never a wait for bytes the frame does not owe. Plain TCP only: over
  // TLS the bytes on the socket are records, not payload.
  void SetReceiveLowWater(uint64_t payload_remaining);
  // SO_RCVLOWAT now (1 = every byte wakes the reader).
  int receive_low_water() const { return receive_low_water_; }

  // Plain TCP only (zero_copy()): one non-blocking gathered write of what
  // the socket takes now, never waiting and never passing through the
  // io_context; would_block (nothing taken) is an error code like any
  // other. Used to put control frames on the wire at once when the writer
  // is idle (PeerWriter::WriteFrontNow).
  size_t WriteSomeNow(const std::vector<boost::asio::const_buffer>& buffers, boost::system::error_code& ec);

  // Best effort, never blocking: writes what the socket takes now (used for
  // a last `disconnect` right before closing). REQUIRES: no write in flight.
  size_t TryWriteNow(boost::asio::const_buffer bytes, boost::system::error_code& ec);

 private:
  boost::asio::ip::tcp::socket plain_;  // unused (never opened) with TLS
  std::unique_ptr<Tls> tls_;
  bool handshake_done_ = false;
  int receive_low_water_ = 1;
};

}  // namespace kvpeer::daemon
