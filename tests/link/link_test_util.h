// Shared helpers for the link tests: a pair of connected agents, seeded random fill, a fake device memory.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "link/agent.h"

namespace tessera::link::testing {

inline void fill_random(std::span<std::byte> bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(bytes.data() + i, &v, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(rng());
}

// Device memory that lives in a host vector behind the DeviceMemory hook (what a backend would implement).
class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(uint64_t n) : bytes_(n) {}
  uint64_t length() const override { return bytes_.size(); }
  Status copy_to_host(uint64_t off, void* dst, uint64_t n) override {
    std::memcpy(dst, bytes_.data() + off, n);
    return ok_status();
  }
  Status copy_from_host(uint64_t off, const void* src, uint64_t n) override {
    std::memcpy(bytes_.data() + off, src, n);
    return ok_status();
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

struct AgentPair {
  std::unique_ptr<Agent> a;
  std::unique_ptr<Agent> b;
};

inline AgentPair make_pair(const std::string& endpoint, LinkOptions link = {}) {
  AgentPair p;
  static int serial = 0;
  ++serial;
  auto a = Agent::create({.name = "a" + std::to_string(serial), .endpoints = {endpoint}, .link = link});
  auto b = Agent::create({.name = "b" + std::to_string(serial), .endpoints = {endpoint}, .link = link});
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  p.a = std::move(*a);
  p.b = std::move(*b);
  Status s = p.a->connect(p.b->info());
  EXPECT_TRUE(s.ok()) << s.to_string();
  return p;
}

}  // namespace tessera::link::testing
