// checksum64: the link's payload checksum. A Fletcher-style sum over 64-bit words in eight independent lanes
// (so it runs near memory speed), finished with a 64-bit mixer. It catches the corruptions a transport bug
// makes (lost, duplicated, reordered or overwritten words); it is not a cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::link {

uint64_t checksum64(const void* data, size_t length);

}  // namespace tessera::link
