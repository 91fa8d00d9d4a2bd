#include "support/node_http.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/http.h"

namespace tessera::testing {

double scrape_metric(const std::string& url, const std::string& name) {
  auto r = http::fetch({.url = url + "/metrics"});
  if (!r.ok()) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
}

std::string complete_greedy(const std::string& url, const std::string& prompt, int n) {
  using json = nlohmann::json;
  auto r = http::fetch(
      {.method = "POST",
       .url = url + "/v1/completions",
       .headers = {{"Content-Type", "application/json"}},
       .body = json{{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}}.dump()});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body, nullptr, false);
  if (!body.is_object() || !body.contains("choices")) return "";
  return body["choices"][0]["text"].get<std::string>();
}

}  // namespace tessera::testing
