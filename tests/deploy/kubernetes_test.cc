// The Kubernetes manifests (deploy/kubernetes/) rendered by `kubectl kustomize` for every overlay and checked
// against what the processes really do: the kinds each overlay must hold, selectors that match the pods'
// labels, container ports equal to the --port flags and probes on named ports that exist, every flag known
// to the subcommand it is passed to, every $(VAR) defined, the credential mounted where
// --cluster-token-file points, the device-plugin resources of the GPU overlay, and probe paths that a real
// `tessera route`, `tessera serve` and etcd answer with 200.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "ctrl/store_fixture.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const std::vector<std::string> kOverlays = {"cpu", "nvidia-amd", "external-etcd"};

// Renders an overlay from a scratch copy of deploy/kubernetes with a cluster credential written in.
std::vector<YAML::Node> render(const std::string& overlay, std::string* error) {
  const std::string root = testing::scratch_dir() + "/k8s-" + overlay;
  fs::remove_all(root);
  fs::copy(testing::source_dir() + "/deploy/kubernetes", root, fs::copy_options::recursive);
  std::ofstream(root + "/overlays/" + overlay + "/cluster-token") << std::string(64, 'a');
  auto r = run_process({"/bin/sh", "-c", "kubectl kustomize " + root + "/overlays/" + overlay}, 60);
  if (r.exit_code != 0) {
    *error = fmt::format("kubectl kustomize failed ({}): {}", r.exit_code, r.err);
    return {};
  }
  return YAML::LoadAll(r.out);
}

std::string kind_of(const YAML::Node& d) { return d["kind"].as<std::string>(); }
std::string name_of(const YAML::Node& d) { return d["metadata"]["name"].as<std::string>(); }

// n[k0][k1]..., or an undefined node when a key is missing (yaml-cpp throws on chained lookups through one).
YAML::Node at(YAML::Node n, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (!n || !n.IsMap() || !n[k]) return YAML::Node(YAML::NodeType::Undefined);
    n = n[k];
  }
  return n;
}

std::map<std::string, std::string> as_map(const YAML::Node& n) {
  std::map<std::string, std::string> out;
  if (n && n.IsMap())
    for (const auto& kv : n) out[kv.first.as<std::string>()] = kv.second.as<std::string>();
  return out;
}

bool subset(const std::map<std::string, std::string>& sel, const std::map<std::string, std::string>& labels) {
  if (sel.empty()) return false;  // an empty selector selects everything: never what these manifests mean
  for (const auto& [k, v] : sel) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

std::vector<std::string> strings(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n && n.IsSequence())
    for (const auto& s : n) out.push_back(s.as<std::string>());
  return out;
}

// The flags `tessera SUB --help` lists.
std::set<std::string> flags_of(const std::string& sub) {
  static std::map<std::string, std::set<std::string>> cache;
  if (auto it = cache.find(sub); it != cache.end()) return it->second;
  auto r = run_process({testing::tessera_bin(), sub, "--help"}, 30);
  std::set<std::string> out;
  std::regex flag("--[a-z][a-z0-9-]*");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), flag); it != std::sregex_iterator(); ++it)
    out.insert(it->str());
  return cache[sub] = out;
}

struct Rendered {
  std::vector<YAML::Node> docs;
  std::vector<YAML::Node> of(const std::string& kind) const {
    std::vector<YAML::Node> out;
    for (const auto& d : docs)
      if (kind_of(d) == kind) out.push_back(d);
    return out;
  }
  std::vector<YAML::Node> workloads() const {
    auto w = of("Deployment");
    for (const auto& s : of("StatefulSet")) w.push_back(s);
    return w;
  }
  const YAML::Node* find(const std::string& kind, const std::string& prefix) const {
    for (const auto& d : docs)
      if (kind_of(d) == kind && name_of(d).rfind(prefix, 0) == 0) return &d;
    return nullptr;
  }
};

class KubernetesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (run_process({"/bin/sh", "-c", "command -v kubectl"}, 10).exit_code != 0) {
      FAIL() << "kubectl is not installed (Debian package kubernetes-client; scripts/install-deps installs it)";
    }
    std::string error;
    r_.docs = render(GetParam(), &error);
    ASSERT_TRUE(error.empty()) << error;
  }
  Rendered r_;
};

TEST_P(KubernetesTest, HoldsEveryKindTheOverlayNeeds) {
  std::map<std::string, int> kinds;
  for (const auto& d : r_.docs) {
    kinds[kind_of(d)]++;
    if (kind_of(d) != "Namespace") {
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(""), "tessera") << name_of(d);
    }
  }
  const bool own_etcd = GetParam() != "external-etcd";
  EXPECT_EQ(kinds["Deployment"], 3);  // router, prefill, decode
  EXPECT_EQ(kinds["StatefulSet"], own_etcd ? 1 : 0);
  EXPECT_EQ(kinds["Service"], own_etcd ? 2 : 1);
  EXPECT_EQ(kinds["PodDisruptionBudget"], own_etcd ? 4 : 3);
  EXPECT_EQ(kinds["NetworkPolicy"], 2);
  EXPECT_EQ(kinds["Secret"], 1);
  EXPECT_EQ(kinds["ConfigMap"], 1);
  for (const char* name : {"tessera-router", "tessera-prefill", "tessera-decode"})
    EXPECT_NE(r_.find("Deployment", name), nullptr) << name;
  EXPECT_NE(r_.find("Service", "tessera-router"), nullptr);
}

TEST_P(KubernetesTest, SelectorsMatchThePodsLabels) {
  std::vector<std::map<std::string, std::string>> pods;
  for (const auto& w : r_.workloads()) {
    auto labels = as_map(w["spec"]["template"]["metadata"]["labels"]);
    EXPECT_TRUE(subset(as_map(w["spec"]["selector"]["matchLabels"]), labels)) << name_of(w);
    EXPECT_EQ(labels["app.kubernetes.io/part-of"], "tessera") << name_of(w) << ": outside the NetworkPolicy";
    pods.push_back(labels);
  }
  auto selects_a_pod = [&](const std::map<std::string, std::string>& sel) {
    for (const auto& p : pods)
      if (subset(sel, p)) return true;
    return false;
  };
  for (const auto& s : r_.of("Service")) EXPECT_TRUE(selects_a_pod(as_map(s["spec"]["selector"]))) << name_of(s);
  for (const auto& p : r_.of("PodDisruptionBudget"))
    EXPECT_TRUE(selects_a_pod(as_map(p["spec"]["selector"]["matchLabels"]))) << name_of(p);
  for (const auto& n : r_.of("NetworkPolicy")) {
    EXPECT_TRUE(selects_a_pod(as_map(n["spec"]["podSelector"]["matchLabels"]))) << name_of(n);
    for (const auto& rule : n["spec"]["ingress"])
      for (const auto& from : rule["from"])
        EXPECT_TRUE(selects_a_pod(as_map(from["podSelector"]["matchLabels"]))) << name_of(n);
  }
  // Only the router's port is open to the world.
  const YAML::Node* pub = r_.find("NetworkPolicy", "tessera-router-public");
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ((*pub)["spec"]["ingress"][0]["ports"][0]["port"].as<int>(), 8080);
  EXPECT_FALSE((*pub)["spec"]["ingress"][0]["from"]);
}

TEST_P(KubernetesTest, PortsProbesFlagsAndVariablesAgreeWithTheProcesses) {
  std::set<std::string> config_keys;
  for (const auto& c : r_.of("ConfigMap"))
    for (const auto& kv : c["data"]) config_keys.insert(kv.first.as<std::string>());
  std::set<std::string> secrets;
  for (const auto& s : r_.of("Secret")) secrets.insert(name_of(s));
  for (const auto& s : r_.of("Secret")) EXPECT_TRUE(s["data"]["token"]) << "the credential's key is 'token'";
  std::map<std::string, int> named_ports;  // "workload/name" -> port
  for (const auto& w : r_.workloads()) {
    for (const auto& c : w["spec"]["template"]["spec"]["containers"]) {
      const std::string where = name_of(w) + "/" + c["name"].as<std::string>();
      std::map<std::string, int> ports;
      for (const auto& p : c["ports"]) {
        ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
        named_ports[name_of(w) + "/" + p["name"].as<std::string>()] = p["containerPort"].as<int>();
      }
      for (const char* probe : {"readinessProbe", "livenessProbe"}) {
        ASSERT_TRUE(c[probe]["httpGet"]) << where << " has no " << probe;
        // The router's liveness is /metrics (its /health is 503 without nodes: KubernetesProbes shows both).
        const bool router_liveness = name_of(w) == "tessera-router" && std::string(probe) == "livenessProbe";
        EXPECT_EQ(c[probe]["httpGet"]["path"].as<std::string>(), router_liveness ? "/metrics" : "/health") << where;
        EXPECT_TRUE(ports.count(c[probe]["httpGet"]["port"].as<std::string>())) << where << ": probe on no port";
      }
      std::set<std::string> env;
      for (const auto& e : c["env"]) env.insert(e["name"].as<std::string>());
      const auto args = strings(c["args"]);
      const bool tessera = !c["command"];
      for (size_t i = 0; i < args.size(); ++i) {
        for (std::smatch m; std::regex_search(args[i], m, std::regex("\\$\\(([A-Z_]+)\\)"));) {
          EXPECT_TRUE(env.count(m[1]) || config_keys.count(m[1])) << where << ": $(" << m[1] << ") is not defined";
          break;
        }
        if (tessera && args[i] == "--port") {
          EXPECT_EQ(ports["http"], std::stoi(args[i + 1])) << where;
        }
        if (!tessera && args[i] == "--listen-client-urls") {
          EXPECT_NE(args[i + 1].find(fmt::format(":{}", ports["client"])), std::string::npos);
        }
        if (!tessera && args[i] == "--listen-peer-urls") {
          EXPECT_NE(args[i + 1].find(fmt::format(":{}", ports["peer"])), std::string::npos);
        }
      }
      if (!tessera) continue;
      // Every flag is one the subcommand (or, after --, `tessera serve`) knows.
      std::string sub = args.at(0);
      for (size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--") {
          sub = "serve";
          continue;
        }
        if (args[i].rfind("--", 0) == 0) {
          EXPECT_TRUE(flags_of(sub).count(args[i])) << where << ": " << sub << " has no " << args[i];
        }
      }
      // The credential is mounted where --cluster-token-file points, from the generated Secret.
      auto it = std::find(args.begin(), args.end(), "--cluster-token-file");
      ASSERT_NE(it, args.end()) << where << " runs without the cluster credential";
      const std::string dir = fs::path(*(it + 1)).parent_path().string();
      bool mounted = false;
      for (const auto& vm : c["volumeMounts"]) {
        if (vm["mountPath"].as<std::string>() != dir) continue;
        for (const auto& v : w["spec"]["template"]["spec"]["volumes"]) {
          if (v["name"].as<std::string>() == vm["name"].as<std::string>() && v["secret"])
            mounted = secrets.count(v["secret"]["secretName"].as<std::string>()) > 0;
        }
      }
      EXPECT_TRUE(mounted) << where << ": " << dir << " is not the credential Secret's mount";
    }
  }
  for (const auto& s : r_.of("Service")) {
    const YAML::Node* w = nullptr;
    for (const auto& cand : r_.workloads())
      if (subset(as_map(s["spec"]["selector"]), as_map(cand["spec"]["template"]["metadata"]["labels"]))) w = &cand;
    ASSERT_NE(w, nullptr);
    for (const auto& p : s["spec"]["ports"]) {
      const std::string key = name_of(*w) + "/" + p["targetPort"].as<std::string>();
      ASSERT_TRUE(named_ports.count(key)) << name_of(s) << ": no container port " << key;
      EXPECT_EQ(named_ports[key], p["port"].as<int>()) << name_of(s);
    }
  }
}

TEST_P(KubernetesTest, DeviceFamiliesAskTheirDevicePlugins) {
  std::map<std::string, std::string> config;
  for (const auto& c : r_.of("ConfigMap")) config = as_map(c["data"]);
  auto limits = [&](const std::string& deployment) {
    const YAML::Node* d = r_.find("Deployment", deployment);
    return d ? as_map(at((*d)["spec"]["template"]["spec"]["containers"][0], {"resources", "limits"}))
             : std::map<std::string, std::string>{};
  };
  if (GetParam() == "nvidia-amd") {
    EXPECT_EQ(config["TESSERA_PREFILL_BACKEND"], "cuda");
    EXPECT_EQ(limits("tessera-prefill")["nvidia.com/gpu"], "1");
    EXPECT_EQ(config["TESSERA_DECODE_BACKEND"], "opencl");
    EXPECT_EQ(limits("tessera-decode")["amd.com/gpu"], "1");
  } else {
    EXPECT_EQ(config["TESSERA_PREFILL_BACKEND"], "cpu");
    EXPECT_TRUE(limits("tessera-prefill").empty());
  }
  // The ctrl flag names etcd (several members), never the single-machine embedded store.
  EXPECT_EQ(config["TESSERA_CTRL"].rfind("etcd=", 0), 0u);
  EXPECT_GE(std::count(config["TESSERA_CTRL"].begin(), config["TESSERA_CTRL"].end(), ','), 2);
}

INSTANTIATE_TEST_SUITE_P(Overlays, KubernetesTest, ::testing::ValuesIn(kOverlays),
                         [](const auto& info) { return std::regex_replace(info.param, std::regex("-"), "_"); });

int http_status(const std::string& url) {
  auto r = http::fetch({.url = url, .timeout_ms = 2000});
  return r.ok() ? r->status : -1;
}

// The probe paths answer 200 on the real processes the manifests run, in the states they must: the router's
// liveness path while it has no node yet (when its /health, the readiness path, is 503), its /health once a
// node registered, a node's /health, etcd's /health.
TEST(KubernetesProbes, HealthAnswersOnTheRouterTheNodesAndEtcd) {
  TS_REQUIRE_STORIES260K();
  testing::BackgroundProcess router({testing::tessera_bin(), "route", "--port", "0", "--ctrl-embedded"});
  const int rport = testing::port_from_line(router.wait_for_line("listening on"));
  ASSERT_GT(rport, 0);
  const std::string rurl = fmt::format("http://127.0.0.1:{}", rport);
  EXPECT_EQ(http_status(rurl + "/metrics"), 200) << "liveness must pass before any node exists";
  EXPECT_EQ(http_status(rurl + "/health"), 503) << "readiness must fail while no node can serve";
  testing::BackgroundProcess node({testing::tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port",
                                   "0", "--role", "both", "--ctrl", rurl});
  const int nport = testing::port_from_line(node.wait_for_line("listening on"));
  ASSERT_GT(nport, 0);
  EXPECT_EQ(http_status(fmt::format("http://127.0.0.1:{}/health", nport)), 200);
  int ready = -1;
  for (int i = 0; i < 100 && ready != 200; ++i) {
    ready = http_status(rurl + "/health");
    if (ready != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(ready, 200) << "the router's readiness path once a node registered";
  const std::string dir = testing::scratch_dir() + "/k8s-etcd";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  auto etcd = ctrl::testing::EtcdProcess::start(dir);
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  EXPECT_EQ(http_status((*etcd)->url() + "/health"), 200);
}

}  // namespace
}  // namespace tessera
