// The vulkan backend's own behaviour beyond the conformance suite: device discovery against vulkaninfo (the
// Vulkan SDK's own tool), data-dependent errors that shaders can only flag, cases it declines and why, and
// the staging-buffer and shared-memory-reduction paths, which lavapipe would otherwise never take (its memory
// is host-visible and it has subgroup arithmetic). Skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "ops/conformance/conformance.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

bool built_with_vulkan() {
  register_builtin_backends();
  auto names = BackendRegistry::global().names();
  return std::find(names.begin(), names.end(), "vulkan") != names.end();
}

Result<std::unique_ptr<Device>> open_vulkan() {
  if (!built_with_vulkan()) {
    return not_found("this binary was built without the vulkan backend (no Vulkan SDK or glslc at configure time)");
  }
  return open_device("vulkan");
}

#define REQUIRE_VULKAN(dev) \
  auto dev = open_vulkan(); \
  if (!dev.ok()) GTEST_SKIP() << "vulkan not available here: " << dev.status().message();

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

// "key = value" lines of `vulkaninfo --summary`, per GPUn section, in order.
std::vector<std::map<std::string, std::string>> vulkaninfo_devices() {
  std::vector<std::map<std::string, std::string>> devices;
  const std::string text = run_command("vulkaninfo --summary 2>/dev/null");
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("GPU", 0) == 0 && line.back() == ':') devices.emplace_back();
    const size_t eq = line.find(" = ");
    if (devices.empty() || eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    devices.back()[key] = line.substr(eq + 3);
  }
  return devices;
}

TEST(Vulkan, InspectListsEveryDeviceAsVulkaninfoSeesIt) {
  REQUIRE_VULKAN(dev);
  auto backend = BackendRegistry::global().create("vulkan");
  ASSERT_TRUE(backend.ok());
  auto described = (*backend)->describe_devices();
  ASSERT_TRUE(described.ok()) << described.status().to_string();
  ASSERT_EQ(static_cast<int>(described->size()), (*backend)->device_count());
  std::vector<std::map<std::string, std::string>> props;
  for (const DeviceDescription& d : *described) {
    props.emplace_back(d.properties.begin(), d.properties.end());
    for (const char* key : {"deviceType", "apiVersion", "memoryHeaps[0]", "memoryTypes[0]", "subgroupSize",
                            "maxStorageBufferRange", "maxComputeSharedMemorySize"}) {
      EXPECT_TRUE(props.back().count(key)) << d.title << " lacks " << key;
    }
  }
  EXPECT_NE((*dev)->info().name.find(described->front().title.substr(described->front().title.find(": ") + 2)),
            std::string::npos)
      << (*dev)->info().name << " vs " << described->front().title;
  auto vi = vulkaninfo_devices();
  if (vi.empty()) {
    std::printf("[ vulkan ] vulkaninfo not found or listed nothing; compared the listing with itself only\n");
    return;
  }
  // The same devices (Tessera lists GPUs first, vulkaninfo in the loader's order): matched by name.
  ASSERT_EQ(vi.size(), described->size());
  for (size_t i = 0; i < vi.size(); ++i) {
    size_t j = 0;
    while (j < described->size() &&
           described->at(j).title != "vulkan device " + std::to_string(j) + ": " + vi[i]["deviceName"])
      ++j;
    ASSERT_LT(j, described->size()) << vi[i]["deviceName"] << " is missing from the listing";
    EXPECT_EQ(props[j]["apiVersion"], vi[i]["apiVersion"]);
    EXPECT_EQ(props[j]["deviceType"] == "cpu", vi[i]["deviceType"] == "PHYSICAL_DEVICE_TYPE_CPU");
  }
  for (size_t j = 1; j < props.size(); ++j) {
    EXPECT_FALSE(props[j - 1]["deviceType"] == "cpu" && props[j]["deviceType"] != "cpu") << "GPUs come first";
  }
}

struct Scratch {
  Device& d;
  std::vector<std::unique_ptr<Buffer>> keep;
  Tensor make(DType t, std::initializer_list<int64_t> shape, size_t offset = 0) {
    Tensor x(nullptr, offset, t, shape);
    keep.push_back(std::move(d.alloc(x.bytes() + offset)).value());
    x.buffer = keep.back().get();
    return x;
  }
};

TEST(Vulkan, OutOfRangeIdsSlotsPositionsAndBlocksAreErrorsNotCrashes) {
  REQUIRE_VULKAN(dev);
  Device& d = **dev;
  std::unique_ptr<Stream> s = d.create_stream();
  Scratch m{d};
  Tensor table = m.make(DType::kQ8_0, {4, 32}), ids = m.make(DType::kI32, {2}), out = m.make(DType::kF32, {2, 32});
  const int32_t bad[] = {1, 9};
  ASSERT_TRUE(s->upload(ids, bad).ok());
  ASSERT_TRUE(s->run(EmbeddingOp{table, ids, out}).ok());  // recorded; the shader flags the id
  Status st = s->synchronize();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_TRUE(s->synchronize().ok()) << "the flag is cleared once reported";

  Tensor kc = m.make(DType::kF16, {1, 4, 1, 8}), vc = m.make(DType::kF16, {1, 4, 1, 8});
  Tensor k = m.make(DType::kF32, {1, 1, 8}), slots = m.make(DType::kI32, {1});
  const int32_t slot = 4;
  ASSERT_TRUE(s->upload(slots, &slot).ok());
  ASSERT_TRUE(s->run(KvWriteOp{k, k, kc, vc, slots}).ok());
  std::vector<float> host(64);
  EXPECT_EQ(s->download(out, host.data()).code(), StatusCode::kOutOfRange);

  // A block number past the cache, and a decode length of 0 (no position to attend from).
  Tensor q = m.make(DType::kF32, {1, 1, 8}), att = m.make(DType::kF32, {1, 1, 8});
  Tensor tables = m.make(DType::kI32, {1, 1}), lens = m.make(DType::kI32, {1});
  for (auto [block, len] : {std::pair<int32_t, int32_t>{3, 2}, {0, 0}}) {
    ASSERT_TRUE(s->upload(tables, &block).ok());
    ASSERT_TRUE(s->upload(lens, &len).ok());
    ASSERT_TRUE(s->run(AttentionDecodeOp{q, kc, vc, tables, lens, att}).ok());
    EXPECT_EQ(s->synchronize().code(), StatusCode::kOutOfRange) << block << " " << len;
  }
  // An expert id past the experts (moe_experts reads it from the device: the shader flags it).
  {
    Tensor x = m.make(DType::kF32, {2, 32}), eo = m.make(DType::kF32, {2, 32}), w = m.make(DType::kQ8_0, {4, 32, 32});
    Tensor eids = m.make(DType::kI32, {2, 1}), ew = m.make(DType::kF32, {2, 1});
    const int32_t experts[] = {3, 4};
    ASSERT_TRUE(s->upload(eids, experts).ok());
    ASSERT_TRUE(s->run(MoeExpertsOp{x, eids, ew, w, w, w, eo}).ok());
    st = s->synchronize();
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_NE(st.message().find("expert id"), std::string::npos) << st.message();
  }
  const int32_t good[] = {0, 1};
  ASSERT_TRUE(s->upload(ids, good).ok());
  ASSERT_TRUE(s->run(EmbeddingOp{table, ids, out}).ok());
  EXPECT_TRUE(s->synchronize().ok());
}

TEST(Vulkan, DeclinedCasesSayWhyAndRunRefusesThem) {
  REQUIRE_VULKAN(dev);
  Device& d = **dev;
  Scratch m{d};
  auto no = [&](const Op& op, const std::string& why) {
    Support s = d.supports(op);
    EXPECT_FALSE(s.supported) << why;
    EXPECT_NE(s.reason.find(why), std::string::npos) << s.reason;
    EXPECT_EQ(d.create_stream()->run(op).code(), StatusCode::kUnimplemented) << why;
  };
  // A block cache whose token rows hold an odd number of blocks (kv_write writes blocks two at a time).
  Tensor kb = m.make(DType::kQ8_0, {1, 4, 1, 32});
  no(KvWriteOp{m.make(DType::kF32, {1, 1, 32}), m.make(DType::kF32, {1, 1, 32}), kb, kb, m.make(DType::kI32, {1})},
     "even number of blocks per token");
  // Heads wider than the attention shader's shared memory.
  Tensor kw = m.make(DType::kF16, {1, 4, 1, 576});
  no(AttentionDecodeOp{m.make(DType::kF32, {1, 1, 576}), kw, kw, m.make(DType::kI32, {1, 1}), m.make(DType::kI32, {1}),
                       m.make(DType::kF32, {1, 1, 576})},
     "head_dim up to 512");
  // An f32 view that does not start on a word.
  no(AddOp{m.make(DType::kF32, {4}, 2), m.make(DType::kF32, {4}), m.make(DType::kF32, {4})}, "multiple of 4 bytes");
  // What validate() refuses stays InvalidArgument.
  EXPECT_EQ(d.create_stream()
                ->run(AddOp{m.make(DType::kF32, {4}), m.make(DType::kF32, {5}), m.make(DType::kF32, {4})})
                .code(),
            StatusCode::kInvalidArgument);
  // Every stored weight type is a matmul weight and an embedding table.
  for (DType t : all_dtypes()) {
    if (t == DType::kI32) continue;
    const int64_t k = dtype_info(t).block_elems == 256 ? 256 : 32;
    Tensor w = m.make(t, {4, k});
    EXPECT_TRUE(d.supports(MatMulOp{m.make(DType::kF32, {1, k}), w, m.make(DType::kF32, {1, 4})}).supported)
        << dtype_name(t);
    EXPECT_TRUE(d.supports(EmbeddingOp{w, m.make(DType::kI32, {1}), m.make(DType::kF32, {1, k})}).supported)
        << dtype_name(t);
  }
}

TEST(Vulkan, MappedBuffersAreTheDevicesMemoryWhereItSharesTheHosts) {
  REQUIRE_VULKAN(dev);
  Device& d = **dev;
  auto b = d.alloc(64);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->host_ptr() != nullptr, d.info().host_visible);
  if (!d.info().host_visible) return;
  std::unique_ptr<Stream> s = d.create_stream();
  const float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(s->write(**b, 16, v, sizeof v).ok());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>((*b)->host_ptr()) + 16, v, sizeof v), 0);
}

// A weight or embedding table larger than one storage-buffer binding (lavapipe binds 128 MiB; a big
// vocabulary's f32 classifier is more) is read in slices of rows, and matches ref.
TEST(Vulkan, WeightsLargerThanOneBindingAreSlicedAndMatchTheReference) {
  REQUIRE_VULKAN(dev);
  auto backend = BackendRegistry::global().create("vulkan");
  auto described = (*backend)->describe_devices();
  ASSERT_TRUE(described.ok());
  uint64_t range = 0;
  for (const auto& [k, v] : described->front().properties) {
    if (k == "maxStorageBufferRange") range = std::stoull(v.substr(v.find('(') + 1));
  }
  ASSERT_GT(range, 0u);
  if (range > (uint64_t{512} << 20)) GTEST_SKIP() << "this device binds " << range << " bytes at once";
  constexpr int64_t k = 1024;
  const int64_t rows = static_cast<int64_t>(range / (k * 4)) + 777;  // a slice and a bit
  auto ref = open_device("ref");
  ASSERT_TRUE(ref.ok());
  std::vector<conformance::Case> cases;
  for (int64_t n : {2, 9}) {  // matmul_vec and matmul_tiled
    cases.push_back({"matmul", DType::kF32, "big", 1e-9, true, [=](conformance::CaseEnv& e) -> Op {
                       MatMulOp op{e.random(DType::kF32, {n, k}), e.random(DType::kF32, {rows, k}),
                                   e.output(DType::kF32, {n, rows})};
                       op.bias = e.random(DType::kF32, {rows});
                       return op;
                     }});
  }
  cases.push_back(
      {"embedding", DType::kF32, "big", 0.0, true, [=](conformance::CaseEnv& e) -> Op {
         const std::vector<int32_t> ids = {0, static_cast<int32_t>(rows - 1), 5, static_cast<int32_t>(rows / 2),
                                           static_cast<int32_t>(rows - 700)};
         return EmbeddingOp{e.random(DType::kF32, {rows, k}), e.ints({5}, ids), e.output(DType::kF32, {5, k})};
       }});
  for (const conformance::Case& c : cases) {
    std::vector<conformance::CaseResult> r = conformance::run_case(c, **ref, {dev->get()});
    EXPECT_EQ(r[0].outcome, conformance::Outcome::kPass) << c.op << ": " << r[0].detail;
  }
}

// TESSERA_VULKAN_STAGING=1 keeps every buffer device-side (copies through staging buffers, as on a discrete
// GPU) and TESSERA_VULKAN_SUBGROUPS=off reduces matmul partial sums through shared memory: a sample of every
// operator's cases, both weight-type families and both caches, still matches ref.
TEST(Vulkan, StagingCopiesAndSharedMemoryReductionsMatchTheReference) {
  if (!built_with_vulkan()) GTEST_SKIP() << "built without the vulkan backend";
  setenv("TESSERA_VULKAN_STAGING", "1", 1);
  setenv("TESSERA_VULKAN_SUBGROUPS", "off", 1);
  auto dev = open_device("vulkan");
  unsetenv("TESSERA_VULKAN_STAGING");
  unsetenv("TESSERA_VULKAN_SUBGROUPS");
  if (!dev.ok()) GTEST_SKIP() << "vulkan not available here: " << dev.status().message();
  EXPECT_FALSE((*dev)->info().host_visible);
  EXPECT_NE((*dev)->info().name.find("device-local + staging"), std::string::npos) << (*dev)->info().name;
  EXPECT_NE((*dev)->info().name.find("reductions: shared memory"), std::string::npos) << (*dev)->info().name;
  auto ref = open_device("ref");
  ASSERT_TRUE(ref.ok());
  std::map<std::string, int> passed;
  std::set<std::string> seen;
  int i = 0;
  for (const conformance::Case& c : conformance::conformance_cases()) {
    // Every seventh fast case (about 350 of them), and each operator's first, so that operators with few cases
    // (split_heads' 3) are sampled whatever the cases before them.
    const bool first = !c.slow && seen.insert(c.op).second;
    if (c.slow || (i++ % 7 != 0 && !first)) continue;
    std::vector<conformance::CaseResult> r = conformance::run_case(c, **ref, {dev->get()});
    EXPECT_EQ(r[0].outcome, conformance::Outcome::kPass)
        << c.op << " " << dtype_name(c.dtype) << " " << c.shape << ": " << r[0].detail;
    passed[c.op] += r[0].outcome == conformance::Outcome::kPass;
  }
  std::string ops;
  for (const auto& [op, count] : passed) ops += op + " ";
  // Every operator of the contract (the encoder operators, scale and the expert scales of moe_route included).
  EXPECT_EQ(passed.size(), 22u) << ops;
}

// gpt-oss's attention sinks (one more logit per head that takes probability and reads no value): every sinks case
// of the conformance suite, prefill and decode, windowed or not, every cache type, against the reference.
TEST(Vulkan, AttentionSinksMatchTheReference) {
  REQUIRE_VULKAN(dev);
  auto ref = open_device("ref");
  ASSERT_TRUE(ref.ok());
  int ran = 0;
  for (const conformance::Case& c : conformance::conformance_cases()) {
    if (c.slow || c.shape.find("sinks") == std::string::npos) continue;
    std::vector<conformance::CaseResult> r = conformance::run_case(c, **ref, {dev->get()});
    EXPECT_EQ(r[0].outcome, conformance::Outcome::kPass)
        << c.op << " " << dtype_name(c.dtype) << " " << c.shape << ": " << r[0].detail;
    ++ran;
  }
  EXPECT_GE(ran, 4) << "the suite has sinks cases for prefill and decode";
}

}  // namespace
}  // namespace tessera::ops
