#include "serve/kv_events_api.h"

#include <charconv>
#include <string>

#include "api/kv_events.h"

namespace tessera::serve {
namespace {

uint64_t query_u64(const http::Request& r, const char* key) {
  auto it = r.query.find(key);
  if (it == r.query.end()) return 0;
  uint64_t v = 0;
  const char* end = it->second.data() + it->second.size();
  auto [p, ec] = std::from_chars(it->second.data(), end, v);
  return ec == std::errc() && p == end ? v : 0;
}

}  // namespace

void add_kv_events_route(http::Server& server, const engine::KvEventLog& log, int block_tokens,
                         const ClusterToken& token) {
  server.route("GET", std::string(api::kKvEventsPath),
               http::require_cluster_token(
                   token, [&log, block_tokens](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
                     const engine::KvEventRead read = log.read(query_u64(r, "epoch"), query_u64(r, "after"));
                     api::KvEventsBody b{read.epoch, read.last, block_tokens, read.reset, {}, {}};
                     b.states = read.states;
                     for (int t = 0; t < api::kKvTiers; ++t) {
                       b.held[t] = read.held[t];
                       b.held_states[t] = read.held_states[t];
                     }
                     for (const engine::KvEvent& e : read.events) {
                       b.events.push_back(
                           {e.seq, e.type == engine::KvEventType::kStored, e.hash, static_cast<int>(e.tier), e.state});
                     }
                     w->send(200, api::kv_events_body(b), "application/json");
                   }));
}

}  // namespace tessera::serve
