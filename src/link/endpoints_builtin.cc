// The one place that lists the built-in endpoints. Optional SDKs (UCX) are guarded here and in CMake only.
#include <mutex>

#include "link/endpoint.h"

namespace tessera::link {

std::unique_ptr<Endpoint> make_shm_endpoint(const EndpointConfig& config);
std::unique_ptr<Endpoint> make_tcp_endpoint(const EndpointConfig& config);
std::unique_ptr<Endpoint> make_faulty_endpoint(const EndpointConfig& config);
#ifdef TESSERA_HAVE_UCX
std::unique_ptr<Endpoint> make_ucx_endpoint(const EndpointConfig& config);
#endif

void register_builtin_endpoints() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)register_endpoint("shm", make_shm_endpoint);
    (void)register_endpoint("tcp", make_tcp_endpoint);
    (void)register_endpoint("faulty", make_faulty_endpoint);  // fault injection for tests (faulty/)
#ifdef TESSERA_HAVE_UCX
    (void)register_endpoint("ucx", make_ucx_endpoint);
#endif
  });
}

}  // namespace tessera::link
