#include "link/internal/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

Status writev_all(int fd, iovec* iov, int count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    ssize_t put = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
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

}  // namespace tessera::link::internal
