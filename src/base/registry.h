// Registry<Factory>: the one plug-in registry of the project. Every plug-in kind (operator backends, link endpoints,
// control-plane stores, discovery sources, routing strategies, KV connectors) is a Registry of its factory type: a
// plug-in registers its factory under a name from an explicit RegisterBuiltin...() call, and callers ask by name.
//
// The same rules for every kind: a duplicate name is refused (AlreadyExists; the first registration stays), an
// unknown name is NotFound with a message listing the known names ("unknown link endpoint 'x'; known: shm, tcp"),
// never a null factory. Names keep their registration order.
//
// Thread-safety: every method may be called from any thread (registration usually happens once at start-up,
// under a std::call_once in the kind's RegisterBuiltin function).
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/status.h"

namespace tessera {

template <class Factory>
class Registry {
 public:
  struct Entry {
    std::string name;
    std::string description;  // one line for listings (`tessera inspect --devices`, error messages)
    Factory factory;
  };

  // `kind` names the plug-ins in messages: "backend", "link endpoint", "routing strategy", ...
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // AlreadyExists when the name is taken (the first registration stays); InvalidArgument for an empty name.
  Status add(Entry entry) {
    if (entry.name.empty()) return invalid_argument(fmt::format("a {} needs a name", kind_));
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_)
      if (e.name == entry.name) return already_exists(fmt::format("{} '{}' is already registered", kind_, entry.name));
    entries_.push_back(std::move(entry));
    return ok_status();
  }
  Status add(std::string name, Factory factory, std::string description = "") {
    return add(Entry{std::move(name), std::move(description), std::move(factory)});
  }

  // A copy of the entry registered as `name`; NotFound listing the known names otherwise.
  Result<Entry> find(std::string_view name) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_)
      if (e.name == name) return e;
    return not_found(fmt::format("unknown {} '{}'; known: {}", kind_, name, known_locked()));
  }

  bool contains(std::string_view name) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_)
      if (e.name == name) return true;
    return false;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.name);
    return out;
  }

  std::vector<Entry> entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

  const std::string& kind() const { return kind_; }

 private:
  std::string known_locked() const {
    std::string out;
    for (const Entry& e : entries_) out += (out.empty() ? "" : ", ") + e.name;
    return out.empty() ? std::string("(none)") : out;
  }

  const std::string kind_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // GUARDED_BY(mu_)
};

}  // namespace tessera
