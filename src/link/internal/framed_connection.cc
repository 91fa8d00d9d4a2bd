#include "link/internal/framed_connection.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "link/checksum.h"

namespace tessera::link::internal {
namespace {

// Replies (acks, read data, errors) queued for a peer that does not read them: beyond this the peer is
// flooding us with requests, and the connection is closed rather than let the queue grow without bound.
constexpr size_t kMaxQueuedReplies = 1 << 16;
// The largest refused payload skipped to keep the stream in step; a longer claim closes the connection.
constexpr uint64_t kMaxSkippedPayload = 64ull << 20;
constexpr uint64_t kInlineCopyBytes = 4ull << 20;  // local-path operations up to this size run in the caller

Status payload_mismatch(const std::string& peer) {
  return data_loss(fmt::format("payload checksum mismatch on the link with {}: the data was corrupted", peer));
}

// Whether a connected IP socket's two ends are on this host (loopback, or our own address on both ends).
// Unix sockets and anything that cannot be told say no.
bool ip_peer_on_this_host(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof self, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 || self.ss_family != peer.ss_family) {
    return false;
  }
  if (self.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(self).sin_addr;
    const auto& b = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
    return a.s_addr == b.s_addr || (ntohl(b.s_addr) >> 24) == 127;
  }
  if (self.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(self).sin6_addr;
    const auto& b = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    return std::memcmp(&a, &b, sizeof a) == 0 || IN6_IS_ADDR_LOOPBACK(&b);
  }
  return false;
}

}  // namespace

FramedConnection::FramedConnection(AgentCore& core, std::string endpoint, std::string peer, std::vector<int> fds,
                                   LinkOptions options, std::unique_ptr<LocalDataPath> local)
    : core_(core), endpoint_(std::move(endpoint)), peer_(std::move(peer)), options_(options), local_(std::move(local)) {
  inflight_limit_ = options_.max_inflight_bytes;
  if (!fds.empty() && ip_peer_on_this_host(fds.front())) {
    inflight_limit_ = std::min(inflight_limit_, options_.same_host_inflight_bytes);
  }
  for (int fd : fds) {
    auto lane = std::make_unique<Lane>();
    lane->fd = fd;
    lanes_.push_back(std::move(lane));
  }
}

FramedConnection::~FramedConnection() {
  close(cancelled(fmt::format("link to {} closed", peer_)));
  for (auto& lane : lanes_) {
    if (lane->reader.joinable()) lane->reader.join();
    if (lane->writer.joinable()) lane->writer.join();
    ::close(lane->fd);
  }
}

void FramedConnection::start() {
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->reader = std::thread([this, l] { reader_loop(*l); });
    l->writer = std::thread([this, l] { writer_loop(*l); });
  }
}

bool FramedConnection::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !broken_.ok();
}

void FramedConnection::submit(std::shared_ptr<Operation> op, std::vector<Chunk> chunks) {
  Status refuse;
  bool inline_copy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      refuse = broken_;
    } else if (draining_) {
      refuse = unavailable(fmt::format("link to {} is shutting down; the transfer was not started", peer_));
    } else {
      inline_copy = local_ && waiting_.empty() && small_one_sided(*op, chunks);
      if (!inline_copy) {
        for (Chunk& c : chunks) waiting_.push_back(std::move(c));
      }
    }
  }
  if (inline_copy) {
    // A small read/write over a local data path (shm): copying here, in the caller's thread, is cheaper
    // than waking a lane thread. Falls back to the lanes when the region cannot be copied locally.
    std::optional<Status> first = local_->execute(*this, op->kind, chunks[0]);
    if (first) {
      complete_chunk(std::move(chunks[0]), *first);
      for (size_t i = 1; i < chunks.size(); ++i) {
        std::optional<Status> s = local_->execute(*this, op->kind, chunks[i]);
        complete_chunk(std::move(chunks[i]), s ? *s : internal_error("local data path refused a later chunk"));
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (Chunk& c : chunks) waiting_.push_back(std::move(c));
  }
  if (!refuse.ok()) {
    for (Chunk& c : chunks) complete_chunk(std::move(c), refuse);
    return;
  }
  pump();
}

bool FramedConnection::small_one_sided(const Operation& op, const std::vector<Chunk>& chunks) {
  if (op.kind != OpKind::kRead && op.kind != OpKind::kWrite && op.kind != OpKind::kWriteWithImm) return false;
  uint64_t bytes = 0;
  for (const Chunk& c : chunks) {
    if (c.is_imm) return false;
    bytes += c.length;
  }
  return !chunks.empty() && bytes <= kInlineCopyBytes;
}

void FramedConnection::pump() {
  std::vector<Chunk> dropped;
  std::vector<std::pair<Lane*, uint64_t>> sends;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!waiting_.empty() && broken_.ok()) {
      Chunk& c = waiting_.front();
      if (c.op->state->cancel_requested()) {
        dropped.push_back(std::move(c));
        waiting_.pop_front();
        continue;
      }
      // Two chunks may always be in flight (one on the wire while the next is written), within the hard limit.
      const uint64_t after = inflight_bytes_ + c.length;
      const bool room = inflight_.empty() || after <= inflight_limit_ ||
                        (inflight_.size() < 2 && after <= options_.max_inflight_bytes);
      if (!room) break;
      uint64_t id = next_id_++;
      inflight_bytes_ += c.length;
      sends.emplace_back(lanes_[next_lane_++ % lanes_.size()].get(), id);
      inflight_.emplace(id, std::move(c));
      waiting_.pop_front();
    }
  }
  for (auto& [lane, id] : sends) {
    OutItem item;
    item.is_chunk = true;
    item.chunk_id = id;
    enqueue(*lane, std::move(item));
  }
  for (Chunk& c : dropped) complete_chunk(std::move(c), cancelled("transfer cancelled"));
}

void FramedConnection::enqueue(Lane& lane, OutItem item) {
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    lane.queue.push_back(std::move(item));
  }
  lane.cv.notify_one();
}

std::optional<Chunk> FramedConnection::lookup(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inflight_.find(id);
  if (it == inflight_.end()) return std::nullopt;
  return it->second;
}

void FramedConnection::finish(uint64_t id, const Status& s) {
  std::optional<Chunk> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = inflight_.find(id);
    if (it == inflight_.end()) return;  // already failed by close()
    c = std::move(it->second);
    inflight_.erase(it);
    inflight_bytes_ -= c->length;
    ++completing_;
  }
  complete_chunk(std::move(*c), s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --completing_;
  }
  drained_cv_.notify_all();
  pump();
}

void FramedConnection::complete_chunk(Chunk chunk, const Status& s) {
  std::shared_ptr<Operation> op = chunk.op;
  op->record(s);
  if (op->remaining.fetch_sub(1) != 1) return;
  Status err = op->error();
  if (err.ok() && op->state->cancel_requested()) err = cancelled("transfer cancelled");
  if (err.ok() && op->kind == OpKind::kWriteWithImm) {
    bool send_imm = false;
    {
      std::lock_guard<std::mutex> lock(op->mu);
      send_imm = !op->imm_sent;
      op->imm_sent = true;
    }
    if (send_imm) {
      // All data is acknowledged by the peer, so the tag cannot overtake it.
      op->remaining.store(1);
      Chunk imm;
      imm.op = op;
      imm.is_imm = true;
      std::vector<Chunk> one;
      one.push_back(std::move(imm));
      submit(op, std::move(one));
      return;
    }
  }
  op->state->set(err);
}

void FramedConnection::close(Status why) {
  std::map<uint64_t, Chunk> inflight;
  std::deque<Chunk> waiting;
  std::map<uint64_t, std::shared_ptr<DescribeWait>> describes;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      // Someone else is closing: return only once every pending future has its status.
      drained_cv_.wait(lock, [&] { return closed_ && completing_ == 0; });
      return;
    }
    broken_ = why;
    inflight.swap(inflight_);
    waiting.swap(waiting_);
    describes.swap(describes_);
    inflight_bytes_ = 0;
  }
  drained_cv_.notify_all();
  stopping_.store(true);
  for (auto& lane : lanes_) {
    ::shutdown(lane->fd, SHUT_RDWR);
    { std::lock_guard<std::mutex> lock(lane->mu); }
    lane->cv.notify_all();
  }
  for (auto& [id, c] : inflight) complete_chunk(std::move(c), why);
  for (Chunk& c : waiting) complete_chunk(std::move(c), why);
  for (auto& [id, d] : describes) d->state.set(why);
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_cv_.wait(lock, [&] { return completing_ == 0; });  // completions racing with this close
    closed_ = true;
  }
  drained_cv_.notify_all();
}

void FramedConnection::drain_and_close(Status why, std::chrono::milliseconds timeout) {
  std::deque<Chunk> waiting;
  {
    std::unique_lock<std::mutex> lock(mu_);
    draining_ = true;
    waiting.swap(waiting_);
  }
  for (Chunk& c : waiting) complete_chunk(std::move(c), why);
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_cv_.wait_for(lock, timeout, [&] { return (inflight_.empty() && completing_ == 0) || !broken_.ok(); });
  }
  close(why);
}

Result<RegionDesc> FramedConnection::describe_remote(RegionId id, std::chrono::milliseconds timeout) {
  auto wait = std::make_shared<DescribeWait>();
  uint64_t rid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    rid = next_id_++;
    describes_[rid] = wait;
  }
  FrameHeader h = make_header(FrameType::kDescribeReq, rid);
  h.region = to_u64(id);
  Status sent;
  {
    std::lock_guard<std::mutex> lock(lanes_[0]->write_mu);
    sent = flush_owed(*lanes_[0]);
    if (sent.ok()) sent = send_frame(lanes_[0]->fd, h, nullptr, 0);
  }
  bool done = sent.ok() && wait->state.wait_for_ms(timeout.count());
  {
    std::lock_guard<std::mutex> lock(mu_);
    describes_.erase(rid);
  }
  if (!sent.ok()) {
    close(unavailable(fmt::format("link to {} lost: {}", peer_, sent.message())));
    return sent;
  }
  if (!done) return deadline_exceeded(fmt::format("peer {} did not describe region {} in time", peer_, to_u64(id)));
  TS_RETURN_IF_ERROR(wait->state.status());
  return RegionDesc::decode(wait->text);
}

void FramedConnection::writer_loop(Lane& lane) {
  while (true) {
    OutItem item;
    {
      std::unique_lock<std::mutex> lock(lane.mu);
      lane.cv.wait(lock, [&] { return !lane.queue.empty() || stopping_.load(); });
      if (stopping_.load()) return;
      item = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    Status s = write_item(lane, item);
    if (!s.ok()) {
      close(unavailable(fmt::format("link to {} lost: {}", peer_, s.message())));
      return;
    }
  }
}

Status FramedConnection::flush_owed(Lane& lane) {
  if (lane.owed.empty()) return ok_status();
  Status s = write_all(lane.fd, lane.owed.data(), lane.owed.size());
  lane.owed.clear();
  return s;
}

void FramedConnection::reply(Lane& lane, FrameType type, uint64_t op_id) {
  FrameHeader h = make_header(type, op_id);
  {
    std::unique_lock<std::mutex> lock(lane.write_mu, std::try_to_lock);
    if (lock.owns_lock() && lane.owed.empty()) {
      seal(h);
      // Never blocks: a reader stuck in send() while both peers' buffers are full would deadlock the lane.
      ssize_t put = ::send(lane.fd, &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (put == static_cast<ssize_t>(sizeof h)) return;
      if (put > 0) {
        // The rest goes out first thing under write_mu; a flush item makes sure someone sends it.
        lane.owed.assign(reinterpret_cast<const char*>(&h) + put, sizeof h - static_cast<size_t>(put));
        lock.unlock();
        OutItem flush;
        flush.flush_only = true;
        enqueue(lane, std::move(flush));
        return;
      }
      // Would block, or failed: the writer sends it (and meets any error itself).
    }
  }
  OutItem item;
  item.header = h;
  enqueue(lane, std::move(item));
}

Status FramedConnection::write_item(Lane& lane, OutItem& item) {
  if (item.flush_only) {
    std::lock_guard<std::mutex> lock(lane.write_mu);
    return flush_owed(lane);
  }
  if (item.is_chunk) return write_chunk(lane, item.chunk_id);
  FrameHeader h = item.header;
  const void* payload = nullptr;
  size_t n = 0;
  if (item.source) {
    payload = item.source->data + item.source_offset;
    n = h.length;
  } else {
    payload = item.bytes.data();
    n = item.bytes.size();
    h.length = n;
  }
  std::lock_guard<std::mutex> lock(lane.write_mu);
  TS_RETURN_IF_ERROR(flush_owed(lane));
  if (h.type == static_cast<uint8_t>(FrameType::kReadResp)) return send_data_frame(lane.fd, h, payload, n);
  h.aux = checksum64(payload, n);
  return send_frame(lane.fd, h, payload, n);
}

Status FramedConnection::write_chunk(Lane& lane, uint64_t id) {
  std::optional<Chunk> c = lookup(id);
  if (!c) return ok_status();  // failed meanwhile
  OpKind kind = c->op->kind;
  if (c->is_imm) {
    FrameHeader h = make_header(FrameType::kImm, id);
    h.aux = c->op->tag;
    std::lock_guard<std::mutex> lock(lane.write_mu);
    TS_RETURN_IF_ERROR(flush_owed(lane));
    return send_frame(lane.fd, h, nullptr, 0);
  }
  if (local_ && kind != OpKind::kSend) {
    if (std::optional<Status> s = local_->execute(*this, kind, *c)) {
      finish(id, *s);
      return ok_status();
    }
  }
  if (kind == OpKind::kRead) {
    FrameHeader h = make_header(FrameType::kReadReq, id);
    h.region = to_u64(c->remote);
    h.offset = c->remote_offset;
    h.length = c->length;
    std::lock_guard<std::mutex> lock(lane.write_mu);
    TS_RETURN_IF_ERROR(flush_owed(lane));
    return send_frame(lane.fd, h, nullptr, 0);
  }
  FrameHeader h = make_header(kind == OpKind::kSend ? FrameType::kSend : FrameType::kWrite, id);
  h.region = to_u64(c->remote);
  h.offset = c->remote_offset;
  const std::byte* payload = nullptr;
  std::vector<std::byte> staged;
  if (kind == OpKind::kSend) {
    payload = c->payload.data();
    h.length = c->payload.size();
  } else {
    h.length = c->length;
    if (c->local->data) {
      payload = c->local->data + c->local_offset;
    } else {
      staged.resize(c->length);
      if (Status s = c->local->copy_out(c->local_offset, staged.data(), c->length); !s.ok()) {
        finish(id, s);
        return ok_status();
      }
      payload = staged.data();
    }
  }
  std::lock_guard<std::mutex> lock(lane.write_mu);
  TS_RETURN_IF_ERROR(flush_owed(lane));
  return send_data_frame(lane.fd, h, payload, h.length);
}

void FramedConnection::reply_error(Lane& lane, uint64_t op_id, const Status& s) {
  OutItem item;
  item.header = make_header(FrameType::kError, op_id);
  item.header.code = static_cast<uint8_t>(s.code());
  const std::string& m = s.message();
  item.bytes.resize(m.size());
  std::memcpy(item.bytes.data(), m.data(), m.size());
  enqueue(lane, std::move(item));
}

void FramedConnection::reader_loop(Lane& lane) {
  while (true) {
    FrameHeader h;
    Status s = read_exact(lane.fd, &h, sizeof h);
    if (s.ok()) s = verify(h);
    if (s.ok()) s = handle_frame(lane, h);
    if (!s.ok()) {
      // A peer that breaks the protocol (a bad header, an impossible length) loses the connection, with the
      // reason in the log; the process and other connections carry on. A closed socket is routine.
      if (s.code() != StatusCode::kUnavailable) {
        log::warn("link {}: closing the connection with {}: {}", endpoint_, peer_, s.message());
      }
      Status why = s.code() == StatusCode::kUnavailable
                       ? unavailable(fmt::format("link to {} lost: {}", peer_, s.message()))
                       : s.with_context(fmt::format("link to {}", peer_));
      close(why);
      return;
    }
  }
}

Status FramedConnection::handle_frame(Lane& lane, const FrameHeader& h) {
  auto type = static_cast<FrameType>(h.type);
  auto ack = [&](FrameType t) { reply(lane, t, h.op_id); };
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    if (lane.queue.size() > kMaxQueuedReplies) {
      return resource_exhausted(
          fmt::format("the peer sent requests faster than it reads the replies ({} queued)", lane.queue.size()));
    }
  }
  switch (type) {
    case FrameType::kWriteAck:
    case FrameType::kImmAck:
    case FrameType::kSendAck:
    case FrameType::kImm:
    case FrameType::kDescribeReq:
      // Frames without a payload: a length would desynchronise the stream (its bytes read as headers).
      if (h.length != 0) return data_loss(fmt::format("frame type {} with a {}-byte payload", h.type, h.length));
      break;
    default:
      break;
  }
  switch (type) {
    case FrameType::kWrite: {
      std::shared_ptr<Region> r = core_.find_region(RegionId{h.region});
      Status v = r ? check_range(r->length, h.offset, h.length, r->id, "remote")
                   : not_found(fmt::format("region {} is not registered with agent {}", h.region, core_.name()));
      if (!v.ok()) {
        // A refused write's payload is still on the wire; skipping it keeps the stream in step. A claimed
        // length beyond any chunk a peer sends would hold this lane reading (or waiting for) that much.
        if (h.length > kMaxSkippedPayload) {
          return data_loss(fmt::format("a refused {}-byte write ({})", h.length, v.message()));
        }
        TS_RETURN_IF_ERROR(discard_data_payload(lane.fd, h.length));
        reply_error(lane, h.op_id, v);
        return ok_status();
      }
      Status st;
      bool intact = false;
      if (r->data) {
        TS_RETURN_IF_ERROR(read_data_payload(lane.fd, r->data + h.offset, h.length, &intact));
        if (!intact) st = payload_mismatch(core_.name());
      } else {
        // A device region: staged through a bounded buffer, never one of the frame's claimed size.
        Status copied;
        TS_RETURN_IF_ERROR(read_data_payload_pieces(
            lane.fd, h.length, kStagingPieceBytes,
            [&](uint64_t at, const std::byte* p, size_t n) { return r->copy_in(h.offset + at, p, n); }, &intact,
            &copied));
        st = !intact ? payload_mismatch(core_.name()) : copied;
      }
      if (st.ok()) {
        ack(FrameType::kWriteAck);
      } else {
        reply_error(lane, h.op_id, st);
      }
      return ok_status();
    }
    case FrameType::kReadReq: {
      std::shared_ptr<Region> r = core_.find_region(RegionId{h.region});
      Status v = r ? check_range(r->length, h.offset, h.length, r->id, "remote")
                   : not_found(fmt::format("region {} is not registered with agent {}", h.region, core_.name()));
      if (!v.ok()) {
        reply_error(lane, h.op_id, v);
        return ok_status();
      }
      OutItem item;
      item.header = make_header(FrameType::kReadResp, h.op_id);
      if (r->data) {
        item.header.length = h.length;
        item.source = r;
        item.source_offset = h.offset;
      } else {
        if (h.length > kMaxStagedReadBytes) {
          reply_error(lane, h.op_id,
                      invalid_argument(fmt::format("a read of {} bytes from a device region is more than the {} "
                                                   "allowed at once; split it",
                                                   h.length, kMaxStagedReadBytes)));
          return ok_status();
        }
        item.bytes.resize(h.length);
        if (Status st = r->copy_out(h.offset, item.bytes.data(), h.length); !st.ok()) {
          reply_error(lane, h.op_id, st);
          return ok_status();
        }
      }
      enqueue(lane, std::move(item));
      return ok_status();
    }
    case FrameType::kReadResp: {
      std::optional<Chunk> c = lookup(h.op_id);
      // An operation that failed or was cancelled meanwhile: skipped without allocating anything for it.
      if (!c) return discard_data_payload(lane.fd, h.length);
      if (h.length != c->length) {
        return data_loss(fmt::format("peer answered a {}-byte read with {} bytes", c->length, h.length));
      }
      Status st;
      bool intact = false;
      if (c->local->data) {
        TS_RETURN_IF_ERROR(read_data_payload(lane.fd, c->local->data + c->local_offset, h.length, &intact));
        if (!intact) st = payload_mismatch(peer_);
      } else {
        std::vector<std::byte> staged(h.length);
        TS_RETURN_IF_ERROR(read_data_payload(lane.fd, staged.data(), h.length, &intact));
        st = !intact ? payload_mismatch(peer_) : c->local->copy_in(c->local_offset, staged.data(), h.length);
      }
      finish(h.op_id, st);
      return ok_status();
    }
    case FrameType::kWriteAck:
    case FrameType::kImmAck:
    case FrameType::kSendAck:
      finish(h.op_id, ok_status());
      return ok_status();
    case FrameType::kImm:
      core_.deliver_notification(Notification{peer_, h.aux});
      ack(FrameType::kImmAck);
      return ok_status();
    case FrameType::kSend: {
      if (h.length > kMaxMessagePayload) {
        return invalid_argument(
            fmt::format("peer sent a {}-byte message; at most {} are accepted", h.length, kMaxMessagePayload));
      }
      std::vector<std::byte> bytes(h.length);
      bool intact = false;
      TS_RETURN_IF_ERROR(read_data_payload(lane.fd, bytes.data(), bytes.size(), &intact));
      if (!intact) {
        reply_error(lane, h.op_id, payload_mismatch(core_.name()));
        return ok_status();
      }
      if (Status d = core_.deliver_message(peer_, std::move(bytes)); !d.ok()) {
        reply_error(lane, h.op_id, d);
        return ok_status();
      }
      ack(FrameType::kSendAck);
      return ok_status();
    }
    case FrameType::kDescribeReq: {
      std::shared_ptr<Region> r = core_.find_region(RegionId{h.region});
      if (!r) {
        reply_error(lane, h.op_id,
                    not_found(fmt::format("region {} is not registered with agent {}", h.region, core_.name())));
        return ok_status();
      }
      RegionDesc d{core_.name(), r->id, r->length, r->kind, r->shm_name(), {}};
      if (local_) local_->describe(r, d);
      std::string text = d.encode();
      OutItem item;
      item.header = make_header(FrameType::kDescribeResp, h.op_id);
      item.bytes.resize(text.size());
      std::memcpy(item.bytes.data(), text.data(), text.size());
      enqueue(lane, std::move(item));
      return ok_status();
    }
    case FrameType::kDescribeResp:
    case FrameType::kError: {
      if (h.length > kMaxControlPayload) return data_loss("oversized control frame from the peer");
      std::string text(h.length, '\0');
      TS_RETURN_IF_ERROR(read_exact(lane.fd, text.data(), text.size()));
      std::shared_ptr<DescribeWait> d;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = describes_.find(h.op_id);
        if (it != describes_.end()) d = it->second;
      }
      StatusCode code = h.code == 0 || h.code > static_cast<uint8_t>(StatusCode::kInternal)
                            ? StatusCode::kInternal
                            : static_cast<StatusCode>(h.code);
      Status st = type == FrameType::kError ? Status(code, text) : ok_status();
      if (d) {
        d->text = std::move(text);
        d->state.set(st);
      } else {
        finish(h.op_id, st);
      }
      return ok_status();
    }
    default:
      return data_loss(fmt::format("unknown frame type {} from the peer", h.type));
  }
}

}  // namespace tessera::link::internal
