// The framed wire protocol of the socket endpoints (tcp, and shm's control lanes): a fixed 64-byte header,
// protected by its own checksum, followed by `length` payload bytes. Data frames (kWrite, kReadResp, kSend)
// end with an 8-byte trailer holding checksum64 of the payload, so the receiver can sum each piece as it
// arrives (still in cache from the socket copy) instead of a second pass over the whole payload, and a
// sender of a huge payload can sum piece by piece. Other frames carry no trailer. All integers little-endian
// (x86-64 and aarch64 hosts; a big-endian host is refused at build time). Also blocking helpers for
// whole-buffer socket I/O.
#pragma once

#include <sys/uio.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

static_assert(std::endian::native == std::endian::little, "the link wire format is little-endian");

namespace tessera::link::internal {

enum class FrameType : uint8_t {
  kHello = 1,          // region=connection id, offset=lane, aux=lane count, payload=name\nnonce\nmac (accept_loop.h)
  kWrite = 2,          // op_id, region, offset, length, payload=data, trailer=checksum
  kWriteAck = 3,       // op_id
  kReadReq = 4,        // op_id, region, offset, length (requested)
  kReadResp = 5,       // op_id, length, payload=data, trailer=checksum
  kImm = 6,            // op_id, aux=tag
  kImmAck = 7,         // op_id
  kSend = 8,           // op_id, length, payload=message, trailer=checksum
  kSendAck = 9,        // op_id
  kDescribeReq = 10,   // op_id, region
  kDescribeResp = 11,  // op_id, payload=RegionDesc::encode()
  kError = 12,         // op_id, code=StatusCode, payload=message
  kAuth = 13,          // handshake: the connector's proof (payload=mac), then the acceptor's empty "accepted"
};

struct FrameHeader {
  uint32_t magic = 0;
  uint8_t type = 0;
  uint8_t code = 0;
  uint16_t reserved = 0;
  uint64_t op_id = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t aux = 0;
  uint64_t reserved2 = 0;
  uint64_t header_check = 0;
};
static_assert(sizeof(FrameHeader) == 64);

constexpr uint32_t kFrameMagic = 0x4b4c5354;      // "TSLK"
constexpr uint64_t kMaxControlPayload = 1 << 20;  // hello, describe, error messages

FrameHeader make_header(FrameType type, uint64_t op_id);
void seal(FrameHeader& h);            // sets magic and header_check
Status verify(const FrameHeader& h);  // DataLoss on a bad magic or header checksum

// Blocking whole-buffer I/O on a socket; Unavailable on EOF or error (EINTR retried).
Status read_exact(int fd, void* buf, size_t n);
Status write_all(int fd, const void* buf, size_t n);
// flags: extra sendmsg flags (MSG_MORE: more of this frame follows at once, hold a partial segment).
Status writev_all(int fd, iovec* iov, int count, int flags = 0);
// Reads and discards n bytes (a payload that was rejected).
Status discard(int fd, uint64_t n);

// Seals and sends a header plus n payload bytes (the caller sets h.length).
Status send_frame(int fd, FrameHeader h, const void* payload, size_t n);

// A data frame: header, n payload bytes (h.length is set here), and the checksum trailer.
Status send_data_frame(int fd, FrameHeader h, const void* payload, size_t n);
// Reads a data frame's n payload bytes into dst and its trailer; *intact says whether the checksum matched
// (the bytes are in dst either way). Unavailable when the socket fails.
Status read_data_payload(int fd, void* dst, size_t n, bool* intact);
// Reads and discards a data frame's payload and trailer (a write that was rejected).
Status discard_data_payload(int fd, uint64_t n);

}  // namespace tessera::link::internal
