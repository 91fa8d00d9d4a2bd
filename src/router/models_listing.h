// Which models the router serves. GET /v1/models on the router: the union of what the nodes in rotation list, each
// model once (the first node's entry), asking at most `fanout` nodes at once so that the router's thread count does not
// grow with the fleet. Nodes that fail or answer garbage are skipped.
//
// Thread-safety: a pure function of its arguments (it makes HTTP calls).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "router/strategy.h"

namespace tessera::router {

struct ModelsListingOptions {
  ClusterToken cluster_token;
  std::string tls_ca_file;
  int timeout_ms = 2000;
  size_t fanout = 16;
};

// The URLs of `nodes`, in order.
std::vector<std::string> urls_of(const std::vector<NodeSnapshot>& nodes);

// OpenAI's answer to a request for a model nobody serves (404): type invalid_request_error, param "model", code
// model_not_found, the message naming the models that are served.
std::string unknown_model_error(const std::string& model, const std::vector<std::string>& served);

// The `data` array of the listing; empty when no node answered.
nlohmann::json list_models(const std::vector<std::string>& node_urls, const ModelsListingOptions& options);

}  // namespace tessera::router
