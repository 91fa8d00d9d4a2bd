// The one plug-in registry (base/registry.h) and every kind built on it: a duplicate name is refused and the first
// registration stays, an unknown name is NotFound listing the known names, for backends, link endpoints,
// control-plane stores, discovery sources and routing strategies alike.
#include "base/registry.h"

#include <gtest/gtest.h>

#include <functional>

#include "ctrl/store.h"
#include "link/discovery.h"
#include "link/endpoint.h"
#include "ops/registry.h"
#include "router/strategy.h"

namespace tessera {
namespace {

TEST(Registry, DuplicatesAreRefusedAndUnknownNamesListTheKnownOnes) {
  Registry<std::function<int()>> r("widget");
  ASSERT_TRUE(r.add(
                   "a", [] { return 1; }, "the first")
                  .ok());
  ASSERT_TRUE(r.add("b", [] { return 2; }).ok());
  Status dup = r.add("a", [] { return 3; });
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.message(), "widget 'a' is already registered");
  EXPECT_EQ(r.find("a")->factory(), 1);  // the first registration stays
  EXPECT_EQ(r.find("a")->description, "the first");
  auto missing = r.find("c");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "unknown widget 'c'; known: a, b");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.add("", [] { return 0; }).code(), StatusCode::kInvalidArgument);
  Registry<std::function<int()>> empty("gadget");
  EXPECT_EQ(empty.find("x").status().message(), "unknown gadget 'x'; known: (none)");
}

TEST(Registry, EveryPluginKindFollowsTheSameRules) {
  // Backends.
  ops::register_builtin_backends();
  EXPECT_EQ(ops::BackendRegistry::global()
                .add({"ref", "again", [] { return Result<std::unique_ptr<ops::Backend>>(unavailable("x")); }})
                .code(),
            StatusCode::kAlreadyExists);
  auto b = ops::BackendRegistry::global().create("tpu");
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b.status().message().rfind("unknown backend 'tpu'; known: ref, cpu", 0), 0u) << b.status().message();
  // Link endpoints.
  link::register_builtin_endpoints();
  EXPECT_EQ(link::register_endpoint("tcp", nullptr).code(), StatusCode::kAlreadyExists);
  auto e = link::make_endpoint("carrier-pigeon", {});
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_NE(e.status().message().find("unknown link endpoint 'carrier-pigeon'; known: shm, tcp"), std::string::npos)
      << e.status().message();
  // Control-plane stores.
  ctrl::register_builtin_stores();
  EXPECT_EQ(ctrl::register_store("etcd", nullptr).code(), StatusCode::kAlreadyExists);
  auto s = ctrl::make_store("zookeeper", "http://127.0.0.1:1");
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.status().message(), "unknown ctrl store 'zookeeper'; known: embedded, etcd");
  // Discovery sources.
  EXPECT_EQ(link::register_discovery("static", nullptr).code(), StatusCode::kAlreadyExists);
  auto d = link::make_discovery("dns", "");
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(d.status().message(), "unknown discovery 'dns'; known: static, ctrl");
  // Routing strategies.
  auto st = router::builtin_strategies().create("fastest", {});
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(st.status().message().rfind("unknown routing strategy 'fastest'; known: round_robin", 0), 0u);
}

}  // namespace
}  // namespace tessera
