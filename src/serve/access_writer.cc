#include "serve/access_writer.h"

#include <atomic>

#include "api/trace_context.h"

namespace tessera::serve {
namespace {

class AccessWriter : public http::ResponseWriter {
 public:
  AccessWriter(std::shared_ptr<http::ResponseWriter> inner, std::shared_ptr<const RequestTag> tag)
      : inner_(std::move(inner)), tag_(std::move(tag)) {}

  void send(int status, std::string body, std::string content_type, http::Headers extra) override {
    log_once(status);
    inner_->send(status, std::move(body), std::move(content_type), std::move(extra));
  }
  void start_stream(int status, std::string content_type, http::Headers extra) override {
    status_ = status;
    inner_->start_stream(status, std::move(content_type), std::move(extra));
  }
  bool write(std::string data) override { return inner_->write(std::move(data)); }
  void end() override {
    log_once(inner_->client_gone() ? 499 : status_.load());
    inner_->end();
  }
  bool client_gone() const override { return inner_->client_gone(); }
  void on_disconnect(std::function<void()> callback) override { inner_->on_disconnect(std::move(callback)); }

  ~AccessWriter() override { log_once(inner_->client_gone() ? 499 : 500); }  // the inner writer answers 500

 private:
  void log_once(int status) {
    if (logged_.exchange(true)) return;
    log::access({.method = "POST",
                 .route = tag_->route,
                 .model = tag_->model,
                 .status = status,
                 .total_ms = tag_->elapsed_ms(),
                 .request_id = tag_->request_id,
                 .trace_id = tag_->trace.trace_id,
                 .remote = tag_->remote});
  }

  std::shared_ptr<http::ResponseWriter> inner_;
  std::shared_ptr<const RequestTag> tag_;
  std::atomic<int> status_{200};
  std::atomic<bool> logged_{false};
};

}  // namespace

std::shared_ptr<http::ResponseWriter> with_access_log(std::shared_ptr<http::ResponseWriter> inner,
                                                      std::shared_ptr<const RequestTag> tag) {
  return std::make_shared<AccessWriter>(std::move(inner), std::move(tag));
}

std::shared_ptr<RequestTag> tag_of(const http::Request& r, std::string_view prefix) {
  auto tag = std::make_shared<RequestTag>();
  tag->request_id = api::request_id_of(r.header(std::string(api::kRequestIdHeader)), prefix);
  tag->trace = api::trace_of(r.header(std::string(api::kTraceparentHeader)));
  tag->route = r.path;
  tag->remote = r.remote;
  return tag;
}

}  // namespace tessera::serve
