#include "link/faulty/faulty_endpoint.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "base/log.h"
#include "link/faulty/fault_schedule.h"
#include "link/internal/region.h"

namespace tessera::link {
namespace {

struct Counters {
  std::atomic<uint64_t> operations{0}, dropped{0}, delayed{0}, corrupted{0}, disconnected{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

// A private copy of a chunk's bytes with one byte flipped: what a peer sees when the wire corrupts it.
Status corrupt_chunk(internal::Chunk& c, uint64_t seed, uint64_t n, uint64_t index) {
  const uint64_t h = fault_hash(seed, n, 0x1000 + index);
  const auto flip = static_cast<std::byte>((h >> 32) % 255 + 1);  // never zero: the byte always changes
  if (!c.payload.empty()) {
    c.payload[h % c.payload.size()] ^= flip;
    return ok_status();
  }
  if (c.length == 0 || !c.local) return ok_status();
  auto bytes = std::make_shared<std::vector<std::byte>>(c.length);
  TS_RETURN_IF_ERROR(c.local->copy_out(c.local_offset, bytes->data(), c.length));
  (*bytes)[h % c.length] ^= flip;
  auto* region = new internal::Region();
  region->id = c.local->id;
  region->data = bytes->data();
  region->length = c.length;
  c.local = std::shared_ptr<internal::Region>(region, [bytes](internal::Region* r) { delete r; });
  c.local_offset = 0;
  return ok_status();
}

class FaultyConnection final : public Connection {
 public:
  FaultyConnection(std::shared_ptr<Connection> inner, std::shared_ptr<const FaultSpec> spec,
                   std::shared_ptr<std::atomic<uint64_t>> next_op)
      : inner_(std::move(inner)), spec_(std::move(spec)), next_op_(std::move(next_op)) {}

  const std::string& peer() const override { return inner_->peer(); }
  std::string_view endpoint() const override { return inner_->endpoint(); }

  void submit(std::shared_ptr<internal::Operation> op, std::vector<internal::Chunk> chunks) override {
    const uint64_t n = next_op_->fetch_add(1) + 1;
    counters().operations++;
    const FaultDecision d = decide(*spec_, n);
    if (d.disconnect) {
      counters().disconnected++;
      log::warn("link fault: operation {} to {}: disconnect", n, peer());
      inner_->close(unavailable(fmt::format("faulty link: injected disconnect from {} at operation {}", peer(), n)));
      inner_->submit(std::move(op), std::move(chunks));  // fails at once: the connection is closed
      return;
    }
    if (d.drop) {
      counters().dropped++;
      log::warn("link fault: operation {} to {}: dropped ({} chunks)", n, peer(), chunks.size());
      op->state->set(ok_status());  // the sender believes it went out
      return;
    }
    if (d.corrupt && (op->kind == OpKind::kWrite || op->kind == OpKind::kWriteWithImm || op->kind == OpKind::kSend)) {
      counters().corrupted++;
      log::warn("link fault: operation {} to {}: corrupted", n, peer());
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (Status s = corrupt_chunk(chunks[i], spec_->seed, n, i); !s.ok()) {
          op->state->set(s);
          return;
        }
      }
    }
    if (d.delay) {
      counters().delayed++;
      std::this_thread::sleep_for(std::chrono::milliseconds(spec_->delay_ms));
    }
    inner_->submit(std::move(op), std::move(chunks));
  }

  void drain_and_close(Status why, std::chrono::milliseconds timeout) override {
    inner_->drain_and_close(std::move(why), timeout);
  }
  void close(Status why) override { inner_->close(std::move(why)); }
  bool broken() const override { return inner_->broken(); }

 private:
  std::shared_ptr<Connection> inner_;
  std::shared_ptr<const FaultSpec> spec_;
  std::shared_ptr<std::atomic<uint64_t>> next_op_;
};

class FaultyEndpoint final : public Endpoint {
 public:
  explicit FaultyEndpoint(EndpointConfig config) : config_(std::move(config)) {
    std::string text = config_.link.faults;
    if (text.empty()) {
      const char* env = std::getenv("TESSERA_LINK_FAULTS");
      text = env != nullptr ? env : "";
    }
    auto spec = parse_fault_spec(text);
    if (!spec.ok()) {
      error_ = spec.status();
      return;
    }
    spec_ = std::make_shared<const FaultSpec>(std::move(*spec));
    auto inner = make_endpoint(spec_->over, config_);
    if (!inner.ok()) {
      error_ = inner.status().with_context("faulty link: over");
      return;
    }
    inner_ = std::move(*inner);
  }

  std::string_view name() const override { return inner_ ? inner_->name() : "faulty"; }
  EndpointCaps caps() const override { return inner_ ? inner_->caps() : EndpointCaps{}; }

  Result<std::string> listen(internal::AgentCore& core) override {
    if (!error_.ok()) return error_;
    log::warn("link: faulty endpoint over {} with {} fault rule(s), seed {}", spec_->over, spec_->rules.size(),
              spec_->seed);
    return inner_->listen(core);
  }

  Result<std::shared_ptr<Connection>> connect(internal::AgentCore& core, const std::string& peer,
                                              const std::string& address) override {
    if (!error_.ok()) return error_;
    TS_ASSIGN_OR_RETURN(std::shared_ptr<Connection> conn, inner_->connect(core, peer, address));
    return std::shared_ptr<Connection>(std::make_shared<FaultyConnection>(std::move(conn), spec_, next_op_));
  }

  void stop() override {
    if (inner_) inner_->stop();
  }

 private:
  EndpointConfig config_;
  Status error_;
  std::shared_ptr<const FaultSpec> spec_;
  std::unique_ptr<Endpoint> inner_;
  std::shared_ptr<std::atomic<uint64_t>> next_op_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace

std::unique_ptr<Endpoint> make_faulty_endpoint(const EndpointConfig& config) {
  return std::make_unique<FaultyEndpoint>(config);
}

FaultCounts faulty_counts() {
  Counters& c = counters();
  return {c.operations.load(), c.dropped.load(), c.delayed.load(), c.corrupted.load(), c.disconnected.load()};
}

}  // namespace tessera::link
