// The `faulty` endpoint: wraps a real endpoint (tcp, shm, ...) and, on the schedule of a spec
// (fault_schedule.h), drops, delays, corrupts or disconnects the operations this agent starts. It exists to
// test what sits above the link: a corrupted KV transfer must be caught by its checksum, a dropped tag by its
// timeout, a cut connection by a retry.
//
// The spec comes from LinkOptions::faults, else from the TESSERA_LINK_FAULTS environment variable (so a real
// `tessera serve --link-endpoints faulty` can be made faulty without a flag). A bad spec fails listen() with
// InvalidArgument, i.e. the agent refuses to start.
//
// The endpoint presents itself under the wrapped endpoint's name and capabilities, so peers that offer the
// plain endpoint match it; only this side misbehaves. Faults apply to operations submitted on connections
// this agent opened (connect()); connections peers open to it are the wrapped endpoint's own, untouched.
//   drop:       the operation's bytes (and tag) never leave; its future still reports success (silent loss)
//   corrupt:    one seeded byte of every chunk of a write/send is flipped on the wire (the local memory is not
//               touched); reads are not corrupted
//   delay:      the submitting thread waits delay_ms before the operation goes out (a slow link)
//   disconnect: the connection is closed (Unavailable), failing this and every pending operation
//
// Thread-safety: as Endpoint/Connection. Operation numbers come from one counter per endpoint.
#pragma once

#include <cstdint>
#include <memory>

#include "link/endpoint.h"

namespace tessera::link {

std::unique_ptr<Endpoint> make_faulty_endpoint(const EndpointConfig& config);

// Faults injected in this process so far (all faulty endpoints together).
struct FaultCounts {
  uint64_t operations = 0;
  uint64_t dropped = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t disconnected = 0;
};
FaultCounts faulty_counts();

}  // namespace tessera::link
