// Device buffers as link regions (serve/device_region.h): on every backend that opens here, bytes written from a
// device buffer's range over the link land exactly in the peer's host memory, and bytes read from the peer land
// exactly in that range of the device buffer and nowhere else, over tcp and shm.
#include "serve/device_region.h"

#include <gtest/gtest.h>

#include <vector>

#include "link/link_test_util.h"
#include "ops/registry.h"

namespace tessera::serve {
namespace {

TEST(BufferDeviceMemory, DeviceBytesCrossTheLinkBothWays) {
  constexpr uint64_t kBuffer = 1 << 20, kOffset = 4096, kRegion = 300000;
  int tried = 0;
  for (const char* backend : {"ref", "cpu", "opencl", "vulkan", "cuda"}) {
    auto device = ops::open_device(backend);
    if (!device.ok()) continue;
    for (const char* endpoint : {"tcp", "shm"}) {
      SCOPED_TRACE(std::string(backend) + " over " + endpoint);
      ++tried;
      auto buffer = (*device)->alloc(kBuffer);
      ASSERT_TRUE(buffer.ok());
      auto stream = (*device)->create_stream();
      std::vector<std::byte> initial(kBuffer);
      link::testing::fill_random(initial, 1);
      ASSERT_TRUE(stream->write(**buffer, 0, initial.data(), initial.size()).ok());

      auto memory = BufferDeviceMemory::create(**device, **buffer, kOffset, kRegion);
      ASSERT_TRUE(memory.ok());
      EXPECT_FALSE(BufferDeviceMemory::create(**device, **buffer, kBuffer - 10, 11).ok());
      link::testing::AgentPair p = link::testing::make_pair(endpoint);
      auto dev_id = p.a->register_device_region(*memory);
      ASSERT_TRUE(dev_id.ok());
      auto host_id = p.b->allocate_region(kRegion);
      ASSERT_TRUE(host_id.ok());
      auto host = p.b->host_bytes(*host_id);
      ASSERT_TRUE(host.ok());

      // device -> wire -> peer's host memory
      ASSERT_TRUE(p.a->write(p.b->name(), {{*dev_id, 0, *host_id, 0, kRegion}}).wait().ok());
      EXPECT_EQ(std::memcmp(host->data(), initial.data() + kOffset, kRegion), 0);

      // peer's host memory -> wire -> a slice of the device range
      link::testing::fill_random(*host, 2);
      ASSERT_TRUE(p.a->read(p.b->name(), {{*dev_id, 1000, *host_id, 0, 50000}}).wait().ok());
      std::vector<std::byte> now(kBuffer);
      ASSERT_TRUE(stream->read(**buffer, 0, now.data(), now.size()).ok());
      EXPECT_EQ(std::memcmp(now.data() + kOffset + 1000, host->data(), 50000), 0);
      EXPECT_EQ(std::memcmp(now.data(), initial.data(), kOffset + 1000), 0);  // untouched before the slice
      EXPECT_EQ(std::memcmp(now.data() + kOffset + 51000, initial.data() + kOffset + 51000, kBuffer - kOffset - 51000),
                0);  // and after it
      // Outside the region: refused, nothing moves.
      EXPECT_FALSE(p.a->write(p.b->name(), {{*dev_id, kRegion - 10, *host_id, 0, 20}}).wait().ok());
      p.a->shutdown(std::chrono::milliseconds(500));
      p.b->shutdown(std::chrono::milliseconds(500));
    }
  }
  EXPECT_GE(tried, 4);  // ref and cpu over both endpoints at least
}

}  // namespace
}  // namespace tessera::serve
