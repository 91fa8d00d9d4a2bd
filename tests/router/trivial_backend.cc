// A backend that answers instantly, for measuring what the router itself adds (docs/benchmarks.md, Router).
// Speaks just enough of a node: /health, /v1/models, and a fixed /v1/completions answer (or a short SSE
// stream when the body asks for one). Prints "listening on http://127.0.0.1:PORT"; stops on SIGINT/SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "http/http.h"

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  tessera::http::ServerOptions o;
  o.port = argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 0;
  o.io_threads = argc > 2 ? std::atoi(argv[2]) : 1;
  tessera::http::Server server(o);
  using W = std::shared_ptr<tessera::http::ResponseWriter>;
  server.route("GET", "/health",
               [](const tessera::http::Request&, W w) { w->send(200, R"({"status":"ok","kv_blocks_total":1024})"); });
  server.route("GET", "/v1/models", [](const tessera::http::Request&, W w) {
    w->send(200, R"({"object":"list","data":[{"id":"trivial","object":"model"}]})");
  });
  server.route("POST", "/v1/completions", [](const tessera::http::Request& r, W w) {
    if (r.body.find("\"stream\":true") != std::string::npos) {
      w->start_stream(200);
      w->write("data: {\"choices\":[{\"index\":0,\"text\":\"ok\"}]}\n\n");
      w->write("data: [DONE]\n\n");
      w->end();
      return;
    }
    w->send(
        200,
        R"({"id":"c","object":"text_completion","model":"trivial","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})");
  });
  if (!server.start().ok()) return 1;
  std::printf("trivial backend listening on http://127.0.0.1:%u\n", server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  server.stop(1000);
  return 0;
}
