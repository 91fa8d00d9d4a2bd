// The fault-load driver behind `tessera fault-load` (scripts/fault-suite.sh, the planner scripts). C clients
// each send R streamed greedy completions through a router, optionally run a fault command (kill a node, cut
// a link...) once N requests have completed, and account for every token: the driver asks for token ids
// (`x-tessera-token-ids: 1`, which the router honours by forwarding, just before each data chunk, the ids of
// the tokens that chunk carries; api/resume.h), and each request's ids and text are compared with a
// fault-free reference run, so a lost or repeated token is counted exactly (by longest common subsequence).
// The summary is JSON; its "differing" list details the first 20 requests that differ from the reference:
// the node that answered and the prefill node (the router's x-tessera-node and x-tessera-prefill-node),
// wall-clock times, and the first token that differs.
//
// Recovery time: from the start of the fault command until the last request it disturbed has ended: every
// request in flight at that moment, and every later one that failed or was slow (latency above twice the
// pre-fault p99, and at least 250 ms above it) sent before the first run of C consecutive healthy requests
// (C = clients); and at least one request sent after the fault has succeeded. It is an upper bound: it
// includes the normal remainder of in-flight requests the fault did not touch.
// Latency phases: "before" ended before the fault, "after" started once recovered, "during" the rest.
//
// Split as the rest of bench/: run_fault_load() does the I/O (client threads, the fault thread, HTTP);
// CompletionStream, summarize_fault_load() and fault_load_row() are pure and tested on their own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "base/status.h"

namespace tessera::bench {

struct FaultLoadOptions {
  std::string url;
  std::string model = "stories260K";
  int clients = 8;
  int requests = 100;  // per client
  int max_tokens = 32;
  int fault_after = -1;  // completed requests before the fault command runs
  std::string fault_cmd;
  double connect_retry_s = 15;  // a client retries refused connections this long (the router may restart)
  int prompt_words = 0;         // > 0: each prompt is padded with story text to about this many words
  double slo_ttft_ms = 0;       // > 0 (with slo_tpot_ms): count requests within this SLO (planner-shift.sh)
  double slo_tpot_ms = 0;
  ClusterToken token;  // presented to the router: it then names the nodes that answered
};

// The prompt of request i: a story starter and the request's number; with words > 0, padded in front with
// other starters to about that many words, the request's number first so no two prompts share a prefix.
std::string fault_load_prompt(int i, int words = 0);

// One request as a client saw it. Times are seconds since the run began.
struct LoadOutcome {
  double start = 0, end = 0;
  double first = -1;  // the first token's arrival
  bool ok = false;
  std::vector<std::string> tokens;  // token ids, as text
  std::string text;
  int usage_tokens = -1;
  std::string error;
  std::string node, prefill_node;  // the router's x-tessera-node / x-tessera-prefill-node: the request's path
};

// The server-sent events of one streamed completion, fed as chunks arrive: `: tessera-tokens 1,2,3` comments
// (token ids), `data:` chunks (text, finish_reason, usage, error) and `data: [DONE]`.
class CompletionStream {
 public:
  // `now_s` is the arrival time, kept as first_token_s() for the first token-id comment.
  void feed(std::string_view piece, double now_s);

  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::string& text() const { return text_; }
  double first_token_s() const { return first_; }     // -1: none yet
  int usage_tokens() const { return usage_tokens_; }  // -1: no usage chunk
  const std::string& finish_reason() const { return finish_; }
  bool done() const { return done_; }        // [DONE] seen
  bool errored() const { return errored_; }  // an error event
  const std::string& error() const { return error_; }

 private:
  std::string buffer_;
  std::vector<std::string> tokens_;
  std::string text_, finish_, error_;
  double first_ = -1;
  int usage_tokens_ = -1;
  bool done_ = false, errored_ = false;
};

// A fault-free run's tokens and text per request, as --write-reference writes it (JSON lines {"i", "tokens",
// "text"}).
struct LoadReference {
  std::map<int, std::vector<std::string>> tokens;
  std::map<int, std::string> text;
};
// Reads `path`; every request 0..total-1 must be there.
Result<LoadReference> read_load_reference(const std::string& path, int total);
Status write_load_reference(const std::string& path, const std::vector<LoadOutcome>& outcomes);

struct LoadRun {
  std::vector<LoadOutcome> outcomes;  // request i = client i / requests, its (i % requests)-th
  double fault_at = -1;               // when the fault command started (-1: none ran)
  double wall_s = 0;
  double start_unix_ms = 0;  // the run's start on the wall clock, to line times up with other logs
};

// Sends the load and runs the fault; every request's outcome, whatever happened to it.
LoadRun run_fault_load(const FaultLoadOptions& options);

// Longest common subsequence of two token lists: the tokens a request got right.
size_t longest_common_subsequence(const std::vector<std::string>& a, const std::vector<std::string>& b);

// The summary: counts, lost/duplicated tokens against `reference` (null: none), recovery and latency
// phases, goodput when the options name an SLO. Pure.
nlohmann::json summarize_fault_load(const LoadRun& run, const LoadReference* reference,
                                    const FaultLoadOptions& options);

// The docs/faults.md row of a summary: "ROW | label | sent | ok | failed | lost | dup | text | usage |
// recovery | latency before | during | after |".
std::string fault_load_row(const std::string& label, const nlohmann::json& summary);

}  // namespace tessera::bench
