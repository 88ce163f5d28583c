#include "bench/baselines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "bench/util.h"

namespace kvpeer::bench {

namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Anonymous memory, faulted in.
class Buffer {
 public:
  Buffer(uint64_t bytes, uint8_t fill) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw BenchError("mmap " + std::to_string(bytes) + " bytes: " + ErrnoText(errno));
    data_ = static_cast<uint8_t*>(p);
    std::memset(data_, fill, bytes);
  }
  ~Buffer() { ::munmap(data_, bytes_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
  uint64_t bytes_;
};

int64_t ThreadVoluntarySwitches() {
  rusage usage{};
  ::getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A connected loopback TCP pair (client, accepted).
std::pair<Fd, Fd> TcpPair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) throw BenchError("socket(AF_INET): " + ErrnoText(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t len = sizeof(address);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener.get(), 1) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &len) != 0) {
    throw BenchError("loopback listener: " + ErrnoText(errno));
  }
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    throw BenchError("loopback connect: " + ErrnoText(errno));
  }
  Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (server.get() < 0) throw BenchError("loopback accept: " + ErrnoText(errno));
  NoDelay(client.get());
  NoDelay(server.get());
  return {std::move(client), std::move(server)};
}

std::pair<Fd, Fd> UnixPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw BenchError("socketpair(AF_UNIX): " + ErrnoText(errno));
  }
  return {Fd(fds[0]), Fd(fds[1])};
}

bool SendAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool RecvAll(int fd, uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

enum class Received { kBlock, kEnd, kFailed };

// One whole block, or the peer's orderly end of the stream before it.
Received RecvBlock(int fd, uint8_t* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, data + got, size - got, MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && got == 0) return Received::kEnd;
    if (n <= 0) return Received::kFailed;
    got += static_cast<size_t>(n);
  }
  return Received::kBlock;
}

std::vector<double> RoundTrips(std::pair<Fd, Fd> pair, int count, int warmup, int64_t pace_us,
                               double* echo_cpu_us_per_trip = nullptr) {
  constexpr size_t kMessage = 64;
  const int echo_fd = pair.second.get();
  const int total = count + warmup;
  int64_t echo_cpu_ns = 0;
  std::thread echo([echo_fd, total, &echo_cpu_ns] {
    uint8_t message[kMessage];
    const int64_t cpu0 = ThreadCpuNs();
    for (int i = 0; i < total; ++i) {
      if (!RecvAll(echo_fd, message, kMessage) || !SendAll(echo_fd, message, kMessage)) break;
    }
    echo_cpu_ns = ThreadCpuNs() - cpu0;
  });
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(count));
  uint8_t message[kMessage];
  std::memset(message, 1, kMessage);
  bool ok = true;
  for (int i = 0; i < total && ok; ++i) {
    const int64_t start = NowNs();
    ok = SendAll(pair.first.get(), message, kMessage) && RecvAll(pair.first.get(), message, kMessage);
    if (i >= warmup) samples.push_back(static_cast<double>(NowNs() - start) / 1e3);
    if (pace_us > 0) SleepUs(pace_us);
  }
  echo.join();
  if (!ok) throw BenchError("round-trip baseline: the echo connection failed");
  if (echo_cpu_us_per_trip != nullptr) *echo_cpu_us_per_trip = static_cast<double>(echo_cpu_ns) / 1e3 / total;
  return samples;
}

}  // namespace

RawTransfer RawTcpThroughput(uint64_t block, const RoundLength& length, uint64_t buffer_bytes) {
  auto [client, server] = TcpPair();
  Buffer source(buffer_bytes, 0x5a);
  Buffer dest(buffer_bytes, 0);
  const uint64_t blocks_per_buffer = buffer_bytes / block;
  RawTransfer result;
  bool sent_ok = true;
  const int send_fd = client.get();
  const int64_t start = NowNs();
  int64_t sender_switches = 0;
  std::thread sender([&, send_fd] {
    const int64_t cpu0 = ThreadCpuNs();
    const int64_t switches0 = ThreadVoluntarySwitches();
    for (uint64_t i = 0; sent_ok && !length.Reached(i * block, NowNs() - start); ++i) {
      sent_ok = SendAll(send_fd, source.data() + (i % blocks_per_buffer) * block, block);
    }
    result.sender_cpu_ns = ThreadCpuNs() - cpu0;
    sender_switches = ThreadVoluntarySwitches() - switches0;
    ::shutdown(send_fd, SHUT_WR);  // the receiver's end of the round
  });
  const int64_t cpu0 = ThreadCpuNs();
  const int64_t switches0 = ThreadVoluntarySwitches();
  uint64_t count = 0;
  Received received;
  while ((received = RecvBlock(server.get(), dest.data() + (count % blocks_per_buffer) * block, block)) ==
         Received::kBlock) {
    ++count;
  }
  result.receiver_cpu_ns = ThreadCpuNs() - cpu0;
  result.seconds = static_cast<double>(NowNs() - start) / 1e9;
  result.bytes = count * block;
  const int64_t receiver_switches = ThreadVoluntarySwitches() - switches0;
  sender.join();
  result.context_switches = sender_switches + receiver_switches;
  if (!sent_ok || received != Received::kEnd) throw BenchError("raw TCP baseline: the connection failed");
  if (count == 0 || std::memcmp(source.data(), dest.data(), block) != 0) {
    throw BenchError("raw TCP baseline: bytes differ");
  }
  return result;
}

std::vector<double> TcpRoundTrips(int count, int warmup, int64_t pace_us) {
  return RoundTrips(TcpPair(), count, warmup, pace_us);
}

std::vector<double> UnixRoundTrips(int count, int warmup, double* echo_cpu_us_per_trip, int64_t pace_us) {
  return RoundTrips(UnixPair(), count, warmup, pace_us, echo_cpu_us_per_trip);
}

double MemcpyGBps(uint64_t chunk, uint64_t total, uint64_t buffer_bytes) {
  Buffer source(buffer_bytes, 0x5a);
  Buffer dest(buffer_bytes, 0);
  const uint64_t chunks = buffer_bytes / chunk;
  const uint64_t count = total / chunk;
  const int64_t start = NowNs();
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t at = (i % chunks) * chunk;
    std::memcpy(dest.data() + at, source.data() + at, chunk);
  }
  const double seconds = static_cast<double>(NowNs() - start) / 1e9;
  // Keep the copies observable.
  volatile uint8_t sink = dest.data()[buffer_bytes - 1];
  (void)sink;
  return static_cast<double>(count * chunk) / seconds / 1e9;
}

}  // namespace kvpeer::bench
