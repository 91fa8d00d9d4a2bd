// The "ctrl" discovery: agents publish their AgentInfo under /tessera/agents/<name> in a control-plane store
// (ctrl::Store, embedded or etcd), kept alive by a lease (ctrl::Registration), and look peers up there.
// Config: "<store spec> [ttl_ms=N]", e.g. "embedded=http://127.0.0.1:7070 ttl_ms=3000".
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "ctrl/registry.h"
#include "ctrl/store.h"
#include "link/discovery.h"

namespace tessera::link {
namespace {

class CtrlDiscovery final : public Discovery {
 public:
  CtrlDiscovery(std::unique_ptr<ctrl::Store> store, std::chrono::milliseconds ttl)
      : store_(std::move(store)), ttl_(ttl) {}
  ~CtrlDiscovery() override {
    std::lock_guard<std::mutex> lock(mu_);
    regs_.clear();  // revoke before the store goes
  }

  Status publish(const AgentInfo& self) override {
    TS_ASSIGN_OR_RETURN(auto reg,
                        ctrl::Registration::create(*store_, ctrl::kAgentsPrefix + self.name, self.encode(), ttl_));
    std::lock_guard<std::mutex> lock(mu_);
    regs_[self.name] = std::move(reg);
    return ok_status();
  }

  Status withdraw(const std::string& name) override {
    std::unique_ptr<ctrl::Registration> reg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = regs_.find(name);
      if (it == regs_.end()) return ok_status();
      reg = std::move(it->second);
      regs_.erase(it);
    }
    return ok_status();  // ~Registration revokes
  }

  Result<AgentInfo> lookup(const std::string& name) override {
    std::string key = ctrl::kAgentsPrefix + name;
    TS_ASSIGN_OR_RETURN(auto kvs, store_->range(key));
    for (const ctrl::KeyValue& kv : kvs) {
      if (kv.key == key) return AgentInfo::decode(kv.value);
    }
    return not_found(fmt::format("no agent named '{}' is registered in the control plane", name));
  }

 private:
  std::unique_ptr<ctrl::Store> store_;
  std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ctrl::Registration>> regs_;  // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Discovery>> make_ctrl_discovery(const std::string& config) {
  std::istringstream in(config);
  std::string spec, tok;
  in >> spec;
  int64_t ttl_ms = 3000;
  while (in >> tok) {
    if (tok.rfind("ttl_ms=", 0) == 0) {
      try {
        ttl_ms = std::stoll(tok.substr(7));
      } catch (const std::exception&) {
        return invalid_argument(fmt::format("ctrl discovery: bad '{}'", tok));
      }
    } else {
      return invalid_argument(fmt::format("ctrl discovery: unknown option '{}'", tok));
    }
  }
  TS_ASSIGN_OR_RETURN(auto store, ctrl::make_store(spec));
  return std::unique_ptr<Discovery>(
      std::make_unique<CtrlDiscovery>(std::move(store), std::chrono::milliseconds(ttl_ms)));
}

}  // namespace tessera::link
