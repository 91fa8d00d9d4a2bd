// EtcdWatch (etcd_watch.h): the long-lived watch stream and its member health probe.
#include "ctrl/etcd_watch.h"

#include <climits>
#include <utility>

#include <fmt/format.h>

#include "base/guarded.h"
#include "base/log.h"
#include "ctrl/etcd_wire.h"

namespace tessera::ctrl {

using nlohmann::json;
using namespace etcd_wire;

namespace {
constexpr size_t kMaxWatchBuffer = 64 << 20;  // one watch message is far smaller
}

EtcdWatch::EtcdWatch(EtcdClient& client, std::string prefix, int64_t since, WatchCallback callback)
    : client_(client), prefix_(std::move(prefix)), callback_(std::move(callback)), since_(since) {
  stream_thread_ = std::thread([this] {
    // A throwing callback (or an answer validation missed) must end neither the process nor the watch.
    while (!stop_.load()) {
      run_guarded(
          "ctrl etcd watch", [this] { stream_loop(); },
          [this] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            callback_({}, Status(StatusCode::kOutOfRange, "watch failed unexpectedly; re-read"));
          });
    }
  });
  probe_thread_ = std::thread([this] { run_guarded("ctrl etcd watch probe", [this] { probe_loop(); }); });
}

EtcdWatch::~EtcdWatch() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
    cancel_.store(true);
  }
  cv_.notify_all();
  stream_thread_.join();
  probe_thread_.join();
}

void EtcdWatch::stream_loop() {
  bool reported = false;  // the callback heard that no member answers
  size_t failures = 0;    // consecutive streams that etcd did not accept
  while (!stop_.load()) {
    const size_t member = client_.preferred();
    Status why;
    const bool accepted = stream_once(member, &why);
    if (stop_.load()) return;
    if (accepted) {
      failures = 0;
      reported = false;
    } else {
      ++failures;
    }
    log::info("ctrl: etcd watch on {} ended ({}); resuming after revision {}", client_.endpoint(member),
              why.ok() ? "closed" : why.message(), since_);
    client_.mark_failed(member);
    if (failures >= client_.size()) {
      // A whole round of members refused: tell the callback once, and pause before the next round.
      if (!reported) {
        callback_({}, unavailable(fmt::format("etcd watch: no member of {} answers; last: {}", client_.size(),
                                              why.ok() ? "stream closed" : why.message())));
      }
      reported = true;
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_.load(); });
    }
  }
}

bool EtcdWatch::stream_once(size_t member, Status* why) {
  http::ClientRequest req;
  if (Status s = client_.prepare(member, "/v3/watch", req, std::exchange(refresh_auth_, false)); !s.ok()) {
    *why = s;
    return false;
  }
  req.body = json{{"create_request",
                   {{"key", b64_encode(prefix_)},
                    {"range_end", b64_encode(prefix_end(prefix_))},
                    {"start_revision", since_ + 1},
                    {"progress_notify", true}}}}
                 .dump();
  req.timeout_ms = INT_MAX;  // a stream, not an exchange: it ends when cancelled or broken
  req.cancel = &cancel_;
  {
    std::lock_guard lock(mu_);
    if (stop_.load()) return false;
    cancel_.store(false);
    streaming_ = true;
    member_ = member;
    ++stream_seq_;
  }
  cv_.notify_all();
  bool accepted = false;
  Status stream_error;
  std::string buf;
  auto r = http::fetch_streaming(req, [&](std::string_view chunk) {
    buf.append(chunk);
    if (buf.size() > kMaxWatchBuffer) {
      stream_error = data_loss("etcd watch: an unterminated message larger than 64 MiB");
      return false;
    }
    for (const json& msg : take_objects(buf)) {
      if (!msg.is_object()) continue;
      if (msg.contains("error")) {
        // grpc-gateway's stream error: {"error": {"grpc_code": N, "message": "..."}} (or a bare string).
        const json& e = msg.at("error");
        json flat = {{"code", e.is_object() ? to_i64(e, "grpc_code") : 0},
                     {"message", e.is_object() ? str_of(e, "message") : e.dump()}};
        stream_error = client_.error_of(member, "/v3/watch", 200, flat.dump());
        if (stream_error.code() == StatusCode::kUnauthenticated) refresh_auth_ = true;
        return false;
      }
      const json& res = result_of(msg);
      if (res.is_object() && res.contains("created")) accepted = true;
      if (res.is_object() && res.value("canceled", false) == true) {
        if (int64_t compact = to_i64(res, "compact_revision"); compact > 0) {
          // The events after since_ are gone: the callback re-reads the current state, and the stream goes on
          // after the revision etcd reports now (replaying events older than that read is harmless, missing
          // newer ones is not).
          const int64_t now = res.contains("header") ? to_i64(res.at("header"), "revision") : 0;
          since_ = std::max(since_, std::max(now, compact - 1));
          callback_({}, out_of_range(fmt::format("etcd compacted history to revision {}; re-read", compact)));
          accepted = true;  // the member is healthy
          return false;
        }
        stream_error = unavailable(fmt::format("etcd cancelled the watch: {}", str_of(res, "cancel_reason")));
        return false;
      }
      std::vector<WatchEvent> events;
      for (const json& e : array_of(res, "events")) {
        if (!e.is_object() || !e.contains("kv")) continue;
        auto kv = kv_from_etcd(e.at("kv"));
        if (!kv.ok()) continue;
        WatchEvent ev;
        ev.type = str_of(e, "type") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
        ev.kv = std::move(*kv);
        events.push_back(std::move(ev));
      }
      for (const WatchEvent& ev : events) since_ = std::max(since_, ev.kv.mod_revision);
      if (!events.empty()) callback_(events, ok_status());
    }
    return !stop_.load();
  });
  {
    std::lock_guard lock(mu_);
    streaming_ = false;
  }
  if (!stream_error.ok()) {
    *why = stream_error;
  } else if (!r.ok()) {
    *why = r.status();
  } else if (r->status != 200) {
    *why = client_.error_of(member, "/v3/watch", r->status, r->body);
    accepted = false;
  }
  return accepted;
}

void EtcdWatch::probe_loop() {
  const auto period = std::chrono::milliseconds(client_.timeouts().probe_interval_ms);
  // A member that answers "no leader" may be in the middle of an election (its leader just died) rather than
  // cut off from the quorum: the stream moves only when the answer holds for this many probes in a row, so
  // that one election does not walk the stream round every member.
  constexpr int kLeaderlessProbes = 3;
  std::unique_lock lock(mu_);
  uint64_t leaderless_seq = 0;
  int leaderless = 0;
  while (!stop_.load()) {
    cv_.wait_for(lock, period, [this] { return stop_.load(); });
    if (stop_.load() || !streaming_) continue;
    const size_t member = member_;
    const uint64_t seq = stream_seq_;
    lock.unlock();
    Status s = client_.probe(member);
    lock.lock();
    // A failure that is not about the member (a permission, say) does not move the stream.
    bool sick = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
    const bool no_leader = sick && s.message().find("no leader") != std::string::npos;
    if (no_leader) {
      leaderless = leaderless_seq == seq ? leaderless + 1 : 1;
      leaderless_seq = seq;
      sick = leaderless >= kLeaderlessProbes;
    } else {
      leaderless = 0;
    }
    if (sick && streaming_ && stream_seq_ == seq && !stop_.load()) {
      log::warn("ctrl: etcd {} failed its health probe ({}); moving the watch to another member",
                client_.endpoint(member), s.message());
      cancel_.store(true);
    }
  }
}

}  // namespace tessera::ctrl
