#include "link/internal/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "link/checksum.h"

namespace tessera::link::internal {

FrameHeader make_header(FrameType type, uint64_t op_id) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.op_id = op_id;
  return h;
}

void seal(FrameHeader& h) {
  h.magic = kFrameMagic;
  h.header_check = 0;
  h.header_check = checksum64(&h, offsetof(FrameHeader, header_check));
}

Status verify(const FrameHeader& h) {
  if (h.magic != kFrameMagic)
    return data_loss(fmt::format("bad frame magic {:#x}: the peer is not a Tessera link", h.magic));
  if (h.header_check != checksum64(&h, offsetof(FrameHeader, header_check)))
    return data_loss("frame header checksum mismatch: the stream is corrupt");
  return ok_status();
}

Status read_exact(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      return unavailable("peer closed the connection");
    } else if (errno != EINTR) {
      return unavailable(fmt::format("receive failed: {}", std::strerror(errno)));
    }
  }
  return ok_status();
}

Status write_all(int fd, const void* buf, size_t n) {
  iovec iov{const_cast<void*>(buf), n};
  return writev_all(fd, &iov, 1);
}

Status writev_all(int fd, iovec* iov, int count, int flags) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    ssize_t put = ::sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
    if (put < 0) {
      if (errno == EINTR) continue;
      return unavailable(fmt::format("send failed: {}", std::strerror(errno)));
    }
    auto left = static_cast<size_t>(put);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return ok_status();
}

Status discard(int fd, uint64_t n) {
  char buf[65536];
  while (n > 0) {
    size_t take = n < sizeof buf ? static_cast<size_t>(n) : sizeof buf;
    TS_RETURN_IF_ERROR(read_exact(fd, buf, take));
    n -= take;
  }
  return ok_status();
}

Status send_frame(int fd, FrameHeader h, const void* payload, size_t n) {
  seal(h);
  iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(payload), n}};
  return writev_all(fd, iov, n > 0 ? 2 : 1);
}

namespace {
// Payloads up to this size are summed first and go out in one system call with their header and trailer:
// small sends cost the loopback stack more than the sum of a few cache lines does.
constexpr size_t kSumFirstBytes = 256 << 10;
// Larger payloads go out first, in sends of up to this size, each summed right after the socket copied it:
// the socket's copy reads the source from memory once and the sum finds it in cache (summing first would
// read cold memory twice as slowly as the copy does; perf showed the sender's sum falling from 13% to 7% of
// its time). The trailer follows; MSG_MORE keeps the payload's last partial segment for it.
constexpr size_t kPieceBytes = 4 << 20;
}  // namespace

Status send_data_frame(int fd, FrameHeader h, const void* payload, size_t n) {
  h.length = n;
  h.aux = 0;
  seal(h);
  const auto* p = static_cast<const char*>(payload);
  if (n <= kSumFirstBytes) {
    uint64_t sum = checksum64(p, n);
    iovec iov[3] = {{&h, sizeof h}, {const_cast<char*>(p), n}, {&sum, sizeof sum}};
    return writev_all(fd, iov, 3);
  }
  // Should the caller change the bytes between a piece's send and its sum, the receiver sees a mismatch
  // rather than silently different data.
  Checksum64 sum;
  for (size_t at = 0; at < n;) {
    const size_t take = std::min(kPieceBytes, n - at);
    iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(p + at), take}};
    TS_RETURN_IF_ERROR(at == 0 ? writev_all(fd, iov, 2, MSG_MORE) : writev_all(fd, iov + 1, 1, MSG_MORE));
    sum.update(p + at, take);
    at += take;
  }
  uint64_t value = sum.value();
  iovec trailer{&value, sizeof value};
  return writev_all(fd, &trailer, 1);
}

Status read_data_payload(int fd, void* dst, size_t n, bool* intact) {
  // Each receive returns what the socket holds (tens to hundreds of KiB); summing that at once reads it
  // from cache, just after the kernel wrote it.
  auto* p = static_cast<char*>(dst);
  Checksum64 sum;
  for (size_t at = 0; at < n;) {
    ssize_t got = ::recv(fd, p + at, n - at, 0);
    if (got > 0) {
      sum.update(p + at, static_cast<size_t>(got));
      at += static_cast<size_t>(got);
    } else if (got == 0) {
      return unavailable("peer closed the connection");
    } else if (errno != EINTR) {
      return unavailable(fmt::format("receive failed: {}", std::strerror(errno)));
    }
  }
  uint64_t trailer = 0;
  TS_RETURN_IF_ERROR(read_exact(fd, &trailer, sizeof trailer));
  *intact = trailer == sum.value();
  return ok_status();
}

Status read_data_payload_pieces(int fd, uint64_t n, size_t piece,
                                const std::function<Status(uint64_t, const std::byte*, size_t)>& sink, bool* intact,
                                Status* sink_status) {
  std::vector<std::byte> buf(static_cast<size_t>(std::min<uint64_t>(n, piece)));
  Checksum64 sum;
  *sink_status = ok_status();
  for (uint64_t at = 0; at < n;) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - at));
    TS_RETURN_IF_ERROR(read_exact(fd, buf.data(), take));
    sum.update(buf.data(), take);
    if (sink_status->ok()) *sink_status = sink(at, buf.data(), take);
    at += take;
  }
  uint64_t trailer = 0;
  TS_RETURN_IF_ERROR(read_exact(fd, &trailer, sizeof trailer));
  *intact = trailer == sum.value();
  return ok_status();
}

Status discard_data_payload(int fd, uint64_t n) { return discard(fd, n + sizeof(uint64_t)); }

}  // namespace tessera::link::internal
