#include "ops/graph.h"

#include <algorithm>
#include <map>

#include <fmt/core.h>

#include "ops/op_tensors.h"

namespace tessera::ops {
namespace {

constexpr size_t kArenaAlign = 256;

bool same_view(const Tensor& a, const Tensor& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype && a.rank == b.rank && a.dims == b.dims;
}

}  // namespace

int fold_elementwise(std::vector<Op>& ops) {
  int folded = 0;
  std::vector<Op> out;
  out.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto* add = std::get_if<AddOp>(&ops[i]);
    if (add && i + 1 < ops.size() && same_view(add->out, add->a)) {
      if (const auto* norm = std::get_if<RmsNormOp>(&ops[i + 1]); norm && same_view(norm->x, add->a)) {
        out.push_back(AddRmsNormOp{add->a, add->b, norm->weight, norm->out, norm->eps});
        ++folded;
        ++i;
        continue;
      }
    }
    out.push_back(ops[i]);
  }
  ops = std::move(out);
  return folded;
}

Tensor Graph::remap(const Tensor& t) const {
  for (const auto& [buf, off] : placement_) {
    if (t.buffer == buf) {
      Tensor r = t;
      r.buffer = arena_.get();
      r.offset = off + t.offset;
      return r;
    }
  }
  return t;
}

Status Graph::replay(Stream& stream) {
  if (!native_) {
    for (const Op& op : ops_) TS_RETURN_IF_ERROR(stream.run(op));
    return ok_status();
  }
  if (!recording_ || recorded_on_ != &stream) {
    recording_.reset();
    TS_ASSIGN_OR_RETURN(recording_, stream.record(ops_));
    recorded_on_ = &stream;
  }
  return recording_->replay();
}

Result<std::unique_ptr<Graph>> compile(const std::vector<Op>& recorded, const std::vector<Buffer*>& scratch,
                                       Device& device) {
  std::unique_ptr<Graph> g(new Graph());
  g->native_ = device.info().supports_graphs;
  g->ops_ = recorded;
  g->stats_.recorded_ops = static_cast<int>(recorded.size());
  g->stats_.folded = fold_elementwise(g->ops_);
  g->stats_.compiled_ops = static_cast<int>(g->ops_.size());
  for (Op& op : g->ops_) TS_RETURN_IF_ERROR(validate(op).with_context("graph compile"));

  // Live range [first, last] of each scratch buffer over the compiled list.
  struct Value {
    Buffer* buffer;
    size_t first = SIZE_MAX, last = 0;
    size_t offset = 0;
  };
  std::vector<Value> values;
  for (Buffer* b : scratch) values.push_back({b});
  for (size_t i = 0; i < g->ops_.size(); ++i) {
    for_each_tensor(g->ops_[i], [&](Tensor& t) {
      for (Value& v : values) {
        if (t.valid() && t.buffer == v.buffer) {
          v.first = std::min(v.first, i);
          v.last = std::max(v.last, i);
        }
      }
    });
  }
  // Greedy interval packing, largest first: each value takes the lowest offset not overlapping a value
  // already placed whose live range intersects its own.
  std::vector<Value*> order;
  for (Value& v : values) {
    g->stats_.scratch_bytes += v.buffer->size();
    if (v.first != SIZE_MAX) order.push_back(&v);
  }
  std::sort(order.begin(), order.end(),
            [](const Value* a, const Value* b) { return a->buffer->size() > b->buffer->size(); });
  std::vector<const Value*> placed;
  size_t arena = 0;
  for (Value* v : order) {
    const size_t size = (v->buffer->size() + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Value* p : placed) {
      if (p->first <= v->last && v->first <= p->last) {
        busy.emplace_back(p->offset, p->offset + (p->buffer->size() + kArenaAlign - 1) / kArenaAlign * kArenaAlign);
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (auto [lo, hi] : busy) {
      if (at + size <= lo) break;
      at = std::max(at, hi);
    }
    v->offset = at;
    arena = std::max(arena, at + size);
    placed.push_back(v);
  }
  g->stats_.arena_bytes = arena;
  TS_ASSIGN_OR_RETURN(g->arena_, device.alloc(std::max<size_t>(arena, kArenaAlign)));
  for (const Value* v : placed) g->placement_.emplace_back(v->buffer, v->offset);
  for (Op& op : g->ops_) {
    for_each_tensor(op, [&](Tensor& t) {
      if (t.valid()) t = g->remap(t);
    });
  }
  return g;
}

}  // namespace tessera::ops
