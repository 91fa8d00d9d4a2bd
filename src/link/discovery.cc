#include "link/discovery.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace tessera::link {

Result<std::unique_ptr<Discovery>> make_ctrl_discovery(const std::string& config);

namespace {

bool plain_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= ' ' || c == '=' || c > '~') return false;
  }
  return true;
}

}  // namespace

std::string AgentInfo::encode() const {
  std::string out = fmt::format("name={} host={}", name, host_id);
  for (const PeerAddress& a : addresses) out += fmt::format(" {}={}", a.endpoint, a.address);
  return out;
}

Result<AgentInfo> AgentInfo::decode(std::string_view text) {
  AgentInfo info;
  std::istringstream in{std::string(text)};
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == tok.size()) {
      return invalid_argument(fmt::format("agent info: '{}' is not KEY=VALUE", tok));
    }
    std::string key = tok.substr(0, eq), value = tok.substr(eq + 1);
    if (key == "name") {
      info.name = value;
    } else if (key == "host") {
      info.host_id = value;
    } else {
      info.addresses.push_back({key, value});
    }
  }
  if (info.name.empty()) return invalid_argument(fmt::format("agent info '{}' has no name=", text));
  return info;
}

Status StaticDiscovery::publish(const AgentInfo& self) {
  if (!plain_token(self.name))
    return invalid_argument(fmt::format("agent name '{}' must be printable, no spaces", self.name));
  std::lock_guard<std::mutex> lock(mu_);
  agents_[self.name] = self;
  return ok_status();
}

Status StaticDiscovery::withdraw(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  agents_.erase(name);
  return ok_status();
}

Result<AgentInfo> StaticDiscovery::lookup(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(name);
  if (it == agents_.end()) return not_found(fmt::format("no agent named '{}' has been published", name));
  return it->second;
}

DiscoveryRegistry& discovery_registry() {
  static DiscoveryRegistry r("discovery");
  static std::once_flag builtins;
  std::call_once(builtins, [] {
    (void)r.add("static", [](const std::string&) -> Result<std::unique_ptr<Discovery>> {
      return std::unique_ptr<Discovery>(std::make_unique<StaticDiscovery>());
    });
    (void)r.add("ctrl", make_ctrl_discovery);
  });
  return r;
}

Status register_discovery(const std::string& name, DiscoveryFactory factory) {
  return discovery_registry().add(name, std::move(factory));
}

Result<std::unique_ptr<Discovery>> make_discovery(const std::string& name, const std::string& config) {
  TS_ASSIGN_OR_RETURN(DiscoveryRegistry::Entry e, discovery_registry().find(name));
  return e.factory(config);
}

std::string local_host_id() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return fmt::format("{}/{}", host, boot.empty() ? "noboot" : boot);
}

}  // namespace tessera::link
