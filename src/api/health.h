// GET /health of a node: what it answers and what the router believes of it.
//
// 200 {"status": "ok", "model", "models", "backend", "device", "runner", "waiting", "running", "kv_blocks_used",
// "kv_blocks_total"} while
// serving; 503 {"status": "draining"} with x-tessera-draining: 1 while it finishes its work before shutting down. The
// router reads kv_blocks_total as the node's capacity, believed only when plausible: a node claiming 1e300 blocks would
// otherwise draw every request.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::api {

struct NodeHealth {
  std::string model;                // the name answers carry
  std::vector<std::string> models;  // every name a request may use (model first, then --served-model-name's others)
  std::string backend;              // the backend's registry name (the router's dashboard shows it)
  std::string device;               // the device's own name
  int waiting = 0;
  int running = 0;
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  std::string runner = "generate";  // "generate" (completions, chat) or "pooling" (embeddings): serve/embeddings_api.h
};

inline constexpr std::string_view kDrainingHealthBody = R"({"status":"draining"})";
inline constexpr double kMaxReportedBlocks = 1 << 24;

std::string health_body(const NodeHealth& h);
// kv_blocks_total of a 200 body when it is a number in (0, kMaxReportedBlocks]; 0 (unknown) otherwise.
double health_capacity(std::string_view body);
// "runner" of a 200 body ("generate" or "pooling"); empty when the body does not say (an older node).
std::string health_runner(std::string_view body);
// The names the node serves: "models" of a 200 body, else its "model"; empty when neither is there (the router
// then does not know what the node serves). Names that are not short strings are dropped.
std::vector<std::string> health_models(std::string_view body);

}  // namespace tessera::api
