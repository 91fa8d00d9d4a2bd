// AMX detection and the tile-data permission (amx.h). Compiled with the baseline flags: no tile instruction here.
#include "ops/cpu/amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <fmt/core.h>

namespace tessera::ops::cpu {
namespace {

// From the Linux uapi (asm/prctl.h, the xstate feature numbers): not in every libc's headers.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;
constexpr uint64_t kXtileBits = (uint64_t{1} << 17) | (uint64_t{1} << 18);  // XTILECFG, XTILEDATA

bool osxsave() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) != 0;
}

uint64_t xcr0() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

AmxStatus check() {
  if (!cpu_reports_amx()) {
    return {false, "the processor does not report AMX-TILE, AMX-INT8, AMX-BF16 and AVX512-BF16"};
  }
  if (!osxsave() || (xcr0() & kXtileBits) != kXtileBits) {
    return {false, "the operating system does not enable the AMX tile state (XCR0 bits 17-18)"};
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) {
    return {false, fmt::format("Linux refused the AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM: {})",
                               std::strerror(errno))};
  }
  uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || (granted & kXtileBits) != kXtileBits) {
    return {false, "Linux did not grant the AMX tile-data permission"};
  }
  return {true, ""};
}

}  // namespace

bool cpu_reports_amx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned need = (1u << 22) | (1u << 24) | (1u << 25);  // AMX-BF16, AMX-TILE, AMX-INT8
  if ((d & need) != need) return false;
  // AVX512-BF16 (leaf 7 subleaf 1, EAX bit 5): the f32 -> bf16 conversions that feed the bf16 tiles.
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
}

const AmxStatus& amx_status() {
  static std::once_flag once;
  static AmxStatus status;
  std::call_once(once, [] { status = check(); });
  return status;
}

}  // namespace tessera::ops::cpu
