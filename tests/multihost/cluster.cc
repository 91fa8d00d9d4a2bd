// Hosts (cluster.h): network namespaces on a bridge, and the faults the suite injects into them.
#include "cluster.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tessera::multihost {

bool sh(const std::string& cmd) { return testing::run_process({"/bin/sh", "-c", cmd}, 20).exit_code == 0; }

Hosts::Hosts(int count)
    : prefix_(fmt::format("tsm{}", getpid() % 100000)),
      bridge_(prefix_ + "br"),
      subnet_(100 + getpid() % 100),
      count_(count) {}

Hosts::~Hosts() {
  for (int k = 0; k < count_; ++k) {
    sh("ip netns del " + ns(k) + " 2>/dev/null");
    for (int net = 0; net < 2; ++net) sh(fmt::format("ip link del {}v{}{} 2>/dev/null", prefix_, net, k));
  }
  sh("ip link del " + bridge_ + " 2>/dev/null");
  sh("ip link del " + bridge_ + "p 2>/dev/null");
}

std::string Hosts::ns(int k) const { return fmt::format("{}h{}", prefix_, k); }
std::string Hosts::address(int k) const { return fmt::format("10.{}.0.{}", subnet_, k + 1); }

std::string Hosts::create() {
  // Leftovers of runs that died before cleaning up: their process id no longer exists.
  auto list = testing::run_process({"/bin/sh", "-c", "ip netns list | cut -d' ' -f1 | grep '^tsm[0-9]*h[0-9]$'"}, 10);
  for (size_t pos = 0; pos < list.out.size();) {
    size_t nl = list.out.find('\n', pos);
    std::string name = list.out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? list.out.size() : nl + 1;
    const int pid = std::atoi(name.substr(3).c_str());
    if (pid > 0 && pid != getpid() % 100000 && kill(pid, 0) != 0) {
      sh("ip netns del " + name + " 2>/dev/null");
      sh(fmt::format("ip link del tsm{}br 2>/dev/null; ip link del tsm{}brp 2>/dev/null", pid, pid));
    }
  }
  for (int net = 0; net < 2; ++net) {
    const std::string br = net == 0 ? bridge_ : bridge_ + "p";
    if (!sh("ip link add " + br + " type bridge") ||
        !sh(fmt::format("ip addr add 10.{}.{}.254/24 dev {}", subnet_, net, br)) || !sh("ip link set " + br + " up")) {
      return "could not create the bridge " + br;
    }
    for (int k = 0; k < count_; ++k) {
      const std::string outside = fmt::format("{}v{}{}", prefix_, net, k),
                        inside = fmt::format("{}i{}{}", prefix_, net, k);
      const std::string dev = fmt::format("eth{}", net);
      if ((net == 0 && !sh("ip netns add " + ns(k))) ||
          !sh("ip link add " + outside + " type veth peer name " + inside) ||
          !sh("ip link set " + inside + " netns " + ns(k)) || !sh("ip link set " + outside + " master " + br) ||
          !sh("ip link set " + outside + " up") || !sh("ip -n " + ns(k) + " link set " + inside + " name " + dev) ||
          !sh(fmt::format("ip -n {} addr add 10.{}.{}.{}/24 dev {}", ns(k), subnet_, net, k + 1, dev)) ||
          !sh("ip -n " + ns(k) + " link set " + dev + " up") || !sh("ip -n " + ns(k) + " link set lo up")) {
        return "could not create network namespace " + ns(k) + " on the bridge " + br;
      }
    }
  }
  // The veth carries packets once both ends are up (the bridge runs no STP, so its ports forward at once).
  for (int k = 0; k < count_; ++k) {
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      up = sh(fmt::format("ip -n {} link show eth0 | grep -q 'state UP'", ns(k)));
      if (!up) usleep(50000);
    }
    if (!up) return "host " + ns(k) + " never came up on the bridge";
  }
  created_ = true;
  return "";
}

std::vector<std::string> Hosts::on(int k, const std::vector<std::string>& argv) const {
  // posix_spawn does not search PATH: the full path of ip.
  static const std::string ip = [] {
    auto r = testing::run_process({"/bin/sh", "-c", "command -v ip"}, 10);
    return r.exit_code == 0 ? r.out.substr(0, r.out.find('\n')) : std::string("/usr/sbin/ip");
  }();
  std::vector<std::string> out = {
      ip,  "netns", "exec", ns(k), "unshare", "--uts", "/bin/sh", "-c", "hostname " + hostname(k) + " && exec \"$@\"",
      "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool Hosts::cut(int k) { return sh("ip -n " + ns(k) + " link set eth0 down"); }
bool Hosts::restore(int k) { return sh("ip -n " + ns(k) + " link set eth0 up"); }

bool Hosts::isolate_etcd(int k) { return sh("ip -n " + ns(k) + " link set eth1 down"); }
bool Hosts::rejoin_etcd(int k) { return sh("ip -n " + ns(k) + " link set eth1 up"); }

std::string Hosts::peer_address(int k) const { return fmt::format("10.{}.1.{}", subnet_, k + 1); }

}  // namespace tessera::multihost
