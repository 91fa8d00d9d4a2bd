// Small HTTP helpers the end-to-end tests share when they talk to real `tessera serve` / `tessera route`
// processes: one Prometheus sample, and one greedy completion.
#pragma once

#include <string>

namespace tessera::testing {

// The value of the sample line `name value` on url's /metrics (not its # HELP line); -1 when the server does
// not answer or has no such line.
double scrape_metric(const std::string& url, const std::string& name);

// The text of a greedy, non-streamed /v1/completions of `n` tokens for `prompt` on the stories260K model;
// records a test failure (and returns "") when the request does not succeed.
std::string complete_greedy(const std::string& url, const std::string& prompt, int n);

}  // namespace tessera::testing
