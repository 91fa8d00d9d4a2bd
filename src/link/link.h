// The transfer runtime's vocabulary: registered memory regions, assignments, operation kinds, notifications.
//
// A process owns one link::Agent (agent.h). The agent registers memory regions (RegionId), connects to peer
// agents, and moves bytes between its regions and a peer's regions with batched one-sided operations
// (read, write, write_with_imm) or two-sided ones (send/recv). Every operation takes a batch of Assignments
// and returns a TransferFuture (future.h). Endpoints (endpoint.h: shm/, tcp/) carry the bytes.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::link {

// A region handle, unique within one agent for the agent's lifetime (never reused).
enum class RegionId : uint64_t {};

inline uint64_t to_u64(RegionId id) { return static_cast<uint64_t>(id); }

// Where a region's bytes live. Device memory is registered through DeviceMemory (agent.h).
enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

// One contiguous piece of a transfer: `length` bytes between local[local_offset...] and
// remote[remote_offset...]. For send the remote fields are ignored; for recv they are ignored too (the
// message is scattered over the local pieces in order).
struct Assignment {
  RegionId local{};
  uint64_t local_offset = 0;
  RegionId remote{};
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

enum class OpKind : uint8_t { kRead, kWrite, kWriteWithImm, kSend, kRecv };
std::string_view op_kind_name(OpKind kind);

// What a peer needs to address one of our regions. `shm_name` is set when the bytes live in a POSIX shared
// memory segment that a process on the same host may map (the shm endpoint's one-copy data path).
struct RegionDesc {
  std::string agent;
  RegionId id{};
  uint64_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  std::string shm_name;
  // Endpoint-specific access data (ucx: "ucx.addr", "ucx.rkey"); keys and values without spaces or '='.
  std::map<std::string, std::string> attrs;

  // A single-line text form ("agent=a id=3 length=4096 kind=host shm=/tessera-...") for the control plane.
  std::string encode() const;
  static Result<RegionDesc> decode(std::string_view text);
};

// Delivered to the receiver of write_with_imm once all of the operation's data is in its memory.
struct Notification {
  std::string peer;
  uint64_t tag = 0;
};

}  // namespace tessera::link
