// The tcp endpoint: Boost.Asio resolves, listens and connects; every peer gets LinkOptions::streams TCP
// connections (lanes) over which large transfers are striped. After the handshake the lanes are driven by
// FramedConnection (blocking, one reader and one writer thread per lane; frames carry a length and a
// checksum). Asio stays inside this one translation unit.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "link/endpoint.h"
#include "link/internal/accept_loop.h"

namespace tessera::link {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

Result<std::pair<std::string, std::string>> split_host_port(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return invalid_argument(fmt::format("tcp address '{}' is not HOST:PORT", address));
  }
  return std::make_pair(address.substr(0, colon), address.substr(colon + 1));
}

class TcpEndpoint final : public Endpoint {
 public:
  explicit TcpEndpoint(EndpointConfig config) : config_(std::move(config)) {}
  ~TcpEndpoint() override { stop(); }

  std::string_view name() const override { return "tcp"; }
  EndpointCaps caps() const override { return {false, false, 10, 1ull << 20}; }

  Result<std::string> listen(internal::AgentCore& core) override {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(config_.host, ec);
    if (ec) return invalid_argument(fmt::format("tcp listen host '{}': {}", config_.host, ec.message()));
    tcp::acceptor acceptor(io_);
    tcp::endpoint ep(addr, 0);
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(128, ec);
    if (ec) return unavailable(fmt::format("cannot listen on {}: {}", config_.host, ec.message()));
    uint16_t port = acceptor.local_endpoint().port();
    int fd = acceptor.release(ec);
    if (ec) return internal_error(fmt::format("cannot take the tcp listening socket: {}", ec.message()));
    loop_ = std::make_unique<internal::AcceptLoop>(fd, core, "tcp", config_.link, nullptr);
    loop_->start();
    return fmt::format("{}:{}", config_.host, port);
  }

  Result<std::shared_ptr<Connection>> connect(internal::AgentCore& core, const std::string& peer,
                                              const std::string& address) override {
    TS_ASSIGN_OR_RETURN(auto hp, split_host_port(address));
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(hp.first, hp.second, ec);
    if (ec) return unavailable(fmt::format("cannot resolve tcp address {}: {}", address, ec.message()));
    std::vector<int> fds;
    for (int i = 0; i < config_.link.streams; ++i) {
      tcp::socket sock(io_);
      asio::connect(sock, endpoints, ec);
      if (!ec) sock.set_option(tcp::no_delay(true), ec);
      int fd = ec ? -1 : sock.release(ec);
      if (ec || fd < 0) {
        for (int f : fds) ::close(f);
        return unavailable(fmt::format("cannot connect to {} at tcp {}: {}", peer, address, ec.message()));
      }
      fds.push_back(fd);
    }
    return internal::finish_connect(core, "tcp", peer, std::move(fds), config_.link, nullptr);
  }

  void stop() override {
    if (loop_) loop_->stop();
  }

 private:
  EndpointConfig config_;
  asio::io_context io_;
  std::unique_ptr<internal::AcceptLoop> loop_;
};

}  // namespace

std::unique_ptr<Endpoint> make_tcp_endpoint(const EndpointConfig& config) {
  return std::make_unique<TcpEndpoint>(config);
}

}  // namespace tessera::link
