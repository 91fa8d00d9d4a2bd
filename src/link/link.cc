#include "link/link.h"

#include <charconv>
#include <sstream>

#include <fmt/format.h>

namespace tessera::link {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kRead:
      return "read";
    case OpKind::kWrite:
      return "write";
    case OpKind::kWriteWithImm:
      return "write_with_imm";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
  }
  return "?";
}

std::string RegionDesc::encode() const {
  std::string out = fmt::format("agent={} id={} length={} kind={} shm={}", agent, to_u64(id), length,
                                kind == MemoryKind::kHost ? "host" : "device", shm_name.empty() ? "-" : shm_name);
  for (const auto& [k, v] : attrs) out += fmt::format(" {}={}", k, v);
  return out;
}

Result<RegionDesc> RegionDesc::decode(std::string_view text) {
  RegionDesc d;
  std::istringstream in{std::string(text)};
  std::string tok;
  int seen = 0;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos) return invalid_argument(fmt::format("region description: '{}' is not KEY=VALUE", tok));
    std::string key = tok.substr(0, eq), v = tok.substr(eq + 1);
    // Strict decimal: std::stoull would take "-1" as 2^64-1 and ignore trailing junk.
    auto number = [&](uint64_t& out) {
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
      return ec == std::errc() && end == v.data() + v.size() && !v.empty();
    };
    uint64_t n = 0;
    try {
      if (key == "agent") {
        d.agent = v;
      } else if (key == "id") {
        if (!number(n)) return invalid_argument(fmt::format("region description: bad number in '{}'", tok));
        d.id = RegionId{n};
      } else if (key == "length") {
        if (!number(n)) return invalid_argument(fmt::format("region description: bad number in '{}'", tok));
        d.length = n;
      } else if (key == "kind") {
        if (v != "host" && v != "device") return invalid_argument(fmt::format("region kind '{}' unknown", v));
        d.kind = v == "host" ? MemoryKind::kHost : MemoryKind::kDevice;
      } else if (key == "shm") {
        d.shm_name = v == "-" ? "" : v;
      } else {
        d.attrs[key] = v;
        continue;
      }
    } catch (const std::exception&) {
      return invalid_argument(fmt::format("region description: bad number in '{}'", tok));
    }
    ++seen;
  }
  if (seen < 5) return invalid_argument(fmt::format("region description '{}' is incomplete", text));
  return d;
}

}  // namespace tessera::link
