#include "daemon/peer/peer_stream.h"

#include <algorithm>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kvpeer::daemon {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

namespace {

// "what 'path': reason" with OpenSSL's own reason when it has one.
std::string FileError(const char* what, const std::string& path, const boost::system::error_code& ec) {
  return std::string(what) + " '" + path + "': " + ec.message();
}

Status KeyMismatch(const TlsFiles& files) {
  return Status::Invalid("tls-key: '" + files.key + "' is not the private key of the certificate in '" + files.cert +
                         "'");
}

}  // namespace

StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const TlsFiles& files) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls);
  SSL_CTX* native = context->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION) != 1) {
    return Status::Internal("this OpenSSL cannot do TLS 1.3");
  }
  boost::system::error_code ec;
  if (context->set_options(ssl::context::default_workarounds | ssl::context::no_compression, ec); ec) {
    return Status::Internal("TLS: cannot set options: " + ec.message());
  }
  // Stateless peers of one cluster: no session tickets to keep or leak.
  SSL_CTX_set_num_tickets(native, 0);
  if (context->use_certificate_chain_file(files.cert, ec); ec) {
    return Status::Invalid(FileError("tls-cert: cannot load certificate chain", files.cert, ec));
  }
  if (context->use_private_key_file(files.key, ssl::context::pem, ec); ec) {
    if (ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) return KeyMismatch(files);
    return Status::Invalid(FileError("tls-key: cannot load private key", files.key, ec));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return KeyMismatch(files);
  }
  if (context->load_verify_file(files.ca, ec); ec) {
    return Status::Invalid(FileError("tls-ca: cannot load CA certificates", files.ca, ec));
  }
  if (context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec); ec) {
    return Status::Internal("TLS: cannot set the verify mode: " + ec.message());
  }
  return context;
}

Status PeerStream::VerifyPeerName(const std::string& host) {
  if (!tls_) return Status::Ok();
  boost::system::error_code ec;
  if (tls_->set_verify_callback(ssl::host_name_verification(host), ec); ec) {
    return Status::Internal("TLS: cannot verify the peer's name: " + ec.message());
  }
  // SNI for DNS names only (RFC 6066 forbids IP literals).
  asio::ip::make_address(host, ec);
  if (ec) SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str());
  return Status::Ok();
}

Status PeerStream::IdentityMismatch(const std::string& host) const {
  if (!tls_) return Status::Violation("no TLS certificate");
  // Not owned: valid while the connection lives.
  X509* certificate = SSL_get0_peer_certificate(tls_->native_handle());
  if (certificate == nullptr) return Status::Violation("no peer certificate");
  boost::system::error_code not_ip;
  asio::ip::make_address(host, not_ip);
  const int matched =
      not_ip ? X509_check_host(certificate, host.data(), host.size(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, nullptr)
             : X509_check_ip_asc(certificate, host.c_str(), 0);
  if (matched == 1) return Status::Ok();
  return Status::Violation(std::string("the peer's certificate does not name ") + (not_ip ? "host " : "address ") +
                           host);
}

asio::awaitable<void> PeerStream::Handshake(ssl::stream_base::handshake_type role, boost::system::error_code& ec) {
  if (!tls_) co_return;
  co_await tls_->async_handshake(role, asio::redirect_error(asio::use_awaitable, ec));
  handshake_done_ = !ec;
}

asio::awaitable<size_t> PeerStream::WriteSome(const std::vector<asio::const_buffer>& buffers,
                                              boost::system::error_code& ec) {
  if (tls_) co_return co_await tls_->async_write_some(buffers, asio::redirect_error(asio::use_awaitable, ec));
  if (!plain_.non_blocking()) plain_.non_blocking(true, ec);  // for write_some; async operations do not care
  if (ec) co_return 0;
  const size_t n = plain_.write_some(buffers, ec);
  if (ec != asio::error::would_block && ec != asio::error::try_again) {
    // A write that did not block completed without suspending, and awaiting
    // a coroutine that does not suspend does not return to the io_context:
    // while the socket keeps taking bytes the writer would go from frame to
    // frame, and the reader (a peer's lookup), the timers and the control
    // connections would wait until it blocks or runs out of data frames
    // (measured: 150-230 ms during a bulk fetch). Going through the
    // io_context once per write lets them run in between.
    if (!ec) co_await asio::post(plain_.get_executor(), asio::use_awaitable);
    co_return n;
  }
  ec.clear();
  co_await plain_.async_wait(asio::ip::tcp::socket::wait_write, asio::redirect_error(asio::use_awaitable, ec));
  co_return 0;
}

void PeerStream::SetReceiveLowWater(uint64_t payload_remaining) {
  constexpr uint64_t kMaxLowWater = 128 * 1024;
  if (tls_) return;
  const int wanted = static_cast<int>(std::clamp<uint64_t>(payload_remaining, 1, kMaxLowWater));
  if (wanted == receive_low_water_) return;
  boost::system::error_code ignored;
  plain_.set_option(asio::socket_base::receive_low_watermark(wanted), ignored);
  receive_low_water_ = wanted;
}

size_t PeerStream::WriteSomeNow(const std::vector<asio::const_buffer>& buffers, boost::system::error_code& ec) {
  if (tls_) {  // a TLS record cut short by a full socket would be lost: the writer does TLS
    ec = asio::error::operation_not_supported;
    return 0;
  }
  if (!plain_.non_blocking()) plain_.non_blocking(true, ec);
  if (ec) return 0;
  return plain_.write_some(buffers, ec);
}

size_t PeerStream::TryWriteNow(asio::const_buffer bytes, boost::system::error_code& ec) {
  if (tls_ && !handshake_done_) {  // nothing can be said before the handshake
    ec = asio::error::not_connected;
    return 0;
  }
  socket().non_blocking(true, ec);
  if (ec) return 0;
  // Over TLS this seals one record and writes what the socket takes now; a
  // record cut short is harmless because the connection closes next.
  return tls_ ? tls_->write_some(bytes, ec) : plain_.write_some(bytes, ec);
}

}  // namespace kvpeer::daemon
