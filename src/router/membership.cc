#include "router/membership.h"

#include <charconv>

#include <fmt/core.h>

#include "http/http.h"

namespace tessera::router {
namespace {

class StaticMembership final : public MembershipSource {
 public:
  explicit StaticMembership(std::vector<NodeSpec> nodes) : nodes_(std::move(nodes)) {}
  Status start(MembershipListener& listener) override {
    for (const auto& n : nodes_) listener.on_node_added(n);
    return Status();
  }
  void stop() override {}

 private:
  std::vector<NodeSpec> nodes_;
};

}  // namespace

std::unique_ptr<MembershipSource> make_static_membership(std::vector<NodeSpec> nodes) {
  return std::make_unique<StaticMembership>(std::move(nodes));
}

Result<std::string> normalize_node_url(const std::string& url) {
  TS_ASSIGN_OR_RETURN(http::Url u, http::parse_url(url));
  if (u.target != "/") {
    return invalid_argument(fmt::format("node URL '{}' must be http://host:port without a path", url));
  }
  return fmt::format("{}://{}:{}", u.tls ? "https" : "http", u.host, u.port);
}

Result<std::vector<NodeSpec>> parse_node_list(const std::string& list) {
  std::vector<NodeSpec> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    NodeSpec spec;
    size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string w = item.substr(eq + 1);
      double value = 0;
      auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), value);
      if (ec != std::errc() || p != w.data() + w.size() || !(value > 0)) {
        return invalid_argument(fmt::format("bad capacity '{}' in '{}': expected a positive number", w, item));
      }
      spec.capacity = value;
      item = item.substr(0, eq);
    }
    TS_ASSIGN_OR_RETURN(spec.url, normalize_node_url(item));
    for (const auto& o : out) {
      if (o.url == spec.url) return invalid_argument(fmt::format("node '{}' is listed twice", spec.url));
    }
    out.push_back(std::move(spec));
  }
  if (out.empty()) return invalid_argument("no nodes given: expected --nodes http://host:port[,http://host:port...]");
  return out;
}

}  // namespace tessera::router
