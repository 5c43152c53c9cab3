// The one way out of an arm's sandbox (issue 43; docs/arms.md, "Calling a model"): a proxy that kwb runs outside the
// generator's sandbox, reached through a Unix socket bound into it. It forwards a request only to an endpoint the arm
// names, adds the endpoint's key (which the generator never holds), records every exchange (time, sizes, status, the
// bodies, the usage), counts tokens and money (experiment/model_usage.h) and holds the arm's budgets per attempt and
// per arm. A request past a budget is answered 429 and ends the attempt as `budget`. In a replay it calls nothing:
// it serves a recorded attempt's responses in order, so an experiment re-runs without a model or a key.
//
// The protocol inside the sandbox: HTTP/1.1 over the socket at $KWB_MODEL_SOCKET, one request per connection, the
// path's first component naming the endpoint: `POST /anthropic/v1/messages` goes to the endpoint named "anthropic",
// at its url + "/v1/messages". Request bodies are plain (Content-Length; chunked bodies are refused), responses are
// whole: a streamed (server-sent events) answer arrives in one piece, its usage parsed all the same.
#pragma once

#include "experiment/model_usage.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kwb {

// An endpoint an arm may call (experiment.toml [[arms.endpoints]]).
struct ModelEndpoint {
  std::string name;        // the path's first component inside: letters, digits, '-', '_'
  std::string url;         // http:// or https://, without a trailing '/'
  std::string key_env;     // the environment variable that holds its key ("" for none): a name, never the key
  std::string key_header;  // where the key goes: "authorization" (as "Bearer KEY", the default) or e.g. "x-api-key"
};

// One HTTP request as the generator sent it.
struct HttpRequest {
  std::string method;
  std::string target;                                        // "/anthropic/v1/messages?x=1"
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
};

// Parses one request from `raw` (its head and a Content-Length body). nullopt while it is incomplete; an error
// status and a sentence in `why` when it is malformed (400), too large (413), chunked (411) or not GET/POST (405).
struct HttpParse {
  std::optional<HttpRequest> request;
  int error_status = 0;  // 0: complete or incomplete
  std::string why;
};
HttpParse parse_http_request(std::string_view raw, size_t max_body_bytes);

// What the endpoint answered (or, in a replay, what it answered when it was recorded).
struct UpstreamResponse {
  int status = 0;  // 0: no answer (error says why; the generator gets 502)
  std::string content_type;
  std::string body;
  std::string error;
};

// Forwards `request` (the endpoint's part of the path in `path`) with the key in its header. The proxy's default
// forwards with libcurl (opened at run time: libcurl.so.4); tests give their own.
using ModelForward = std::function<UpstreamResponse(const ModelEndpoint&, const HttpRequest& request,
                                                    const std::string& path, const std::string& key)>;
UpstreamResponse forward_with_curl(const ModelEndpoint& endpoint, const HttpRequest& request, const std::string& path,
                                   const std::string& key);

// An arm's spend over all its trajectories, in one file that every trajectory's proxy reads and adds to under an
// exclusive lock (flock on the file itself), so the arm's budget holds across jobs run at once. A limit can still be
// passed by the requests in flight at one time: at most one per running trajectory.
class ArmSpendFile {
public:
  explicit ArmSpendFile(std::filesystem::path file) : m_file(std::move(file)) {}
  ModelSpend read() const;
  // Adds one answered request's usage; returns the spend after it.
  ModelSpend add(const ModelUsage& usage, const std::vector<ModelPrice>& prices) const;
  const std::filesystem::path& file() const { return m_file; }

private:
  std::filesystem::path m_file;
};

nlohmann::json spend_json(const ModelSpend& s);
ModelSpend spend_from_json(const nlohmann::json& j);

struct ModelProxyConfig {
  std::vector<ModelEndpoint> endpoints;
  std::vector<ModelPrice> prices;
  ModelBudget attempt_budget;
  ModelBudget arm_budget;
  std::filesystem::path arm_spend_file;             // ArmSpendFile's
  std::filesystem::path record_dir;                 // exchanges.jsonl and each exchange's bodies; made when absent
  std::filesystem::path socket_dir;                 // a folder of its own, made by the caller; the socket is made in it
  std::optional<std::filesystem::path> replay_dir;  // a recorded attempt's record_dir: serve it instead of calling
  // The SHA-256 of the recorded exchanges.jsonl, from the recorded trajectory's sealed record: the file is read once
  // and served only when it has this digest (each body is then checked against its line). Required with replay_dir.
  std::string replay_sha256;
  std::vector<Secret> secrets;  // the endpoints' keys, by key_env (absent ones: no key)
  size_t max_request_bytes = 32u << 20;
  ModelForward forward;  // empty: forward_with_curl
  // The feedback channel: `POST /kwb/check` with a candidate's source as its body is answered with what this returns
  // (the trajectory's: kwb check on the task's published cases). It runs on kwb's main thread, from
  // serve_main_thread. Empty: the kwb endpoint answers 404.
  std::function<UpstreamResponse(const std::string& source)> check;
  std::uint64_t max_checks = 20;  // per attempt; past it a check is answered 429 and the attempt goes on
};

// What an attempt's proxy saw, for its trajectory record.
struct ModelProxyReport {
  ModelSpend spend;            // this attempt's
  std::uint64_t refused = 0;   // requests answered without forwarding (unknown endpoint, budget, malformed)
  std::uint64_t checks = 0;    // feedback checks run (POST /kwb/check)
  std::string over_budget;     // the first budget passed or refused at ("" when none)
  std::string unnamed;         // the first path that named no endpoint of the arm ("" when none): the attempt ends
  std::string replay_problem;  // the first request a replay could not answer as recorded ("" when none)
  nlohmann::json json() const;
};

// Listens on socket_dir/model.sock (mode 0666: the generator may be a user of its own) from construction, serving
// one connection at a time on a thread of its own, until finish() or destruction. stop_fd() becomes readable once
// the attempt has passed a budget or a replay diverged: the generator's run ends then (GeneratorSpec::stop_fd).
class ModelProxy {
public:
  explicit ModelProxy(ModelProxyConfig config);
  ~ModelProxy();
  ModelProxy(const ModelProxy&) = delete;
  ModelProxy& operator=(const ModelProxy&) = delete;

  std::filesystem::path socket_path() const { return m_config.socket_dir / "model.sock"; }
  int stop_fd() const { return m_stop; }
  // Readable while a check waits for kwb's main thread; serve_main_thread (on that thread) runs what waits.
  int service_fd() const { return m_service; }
  void serve_main_thread();
  // Stops serving (a request being served is finished first) and returns the attempt's account.
  ModelProxyReport finish();

private:
  void serve();
  void handle(int connection);
  // Answers one request: forwarded, replayed or refused; records it.
  std::pair<int, UpstreamResponse> answer(const HttpRequest& request);
  std::pair<int, UpstreamResponse> answer_kwb(const HttpRequest& request, const std::string& path);
  std::pair<int, UpstreamResponse> refused(const HttpRequest& request, const std::string& endpoint, int status,
                                           const std::string& type, const std::string& why);
  UpstreamResponse check_on_main_thread(const std::string& source);
  std::string budget_refusal();  // why the next request may not go ("" when it may)
  std::optional<UpstreamResponse> replayed(const HttpRequest& request, const std::string& endpoint,
                                           std::string& problem);
  UpstreamResponse forwarded(const ModelEndpoint& endpoint, const HttpRequest& request, const std::string& path);
  // Counts an answer against the budgets, records it, and ends the attempt when it passed one.
  void account(const HttpRequest& request, const std::string& endpoint, const UpstreamResponse& response,
               double seconds);
  UpstreamResponse refuse(int status, const std::string& type, const std::string& message);
  void record(const HttpRequest& request, const std::string& endpoint, const UpstreamResponse& response,
              const ModelUsage& usage, std::optional<double> usd, double seconds, const std::string& refused);
  void stop_attempt();

  ModelProxyConfig m_config;
  int m_listen = -1;
  int m_wake = -1;     // eventfd: finish() wakes the thread
  int m_stop = -1;     // eventfd: the attempt must end
  int m_service = -1;  // eventfd: a check waits for the main thread
  struct CheckJob {
    std::string source;
    std::optional<UpstreamResponse> result;
  };
  std::deque<CheckJob*> m_jobs;  // under m_mutex
  std::condition_variable m_job_done;
  bool m_main_gone = false;  // finish() was called: no check will run any more
  std::thread m_thread;
  std::mutex m_mutex;  // m_report
  ModelProxyReport m_report;
  std::uint64_t m_sequence = 0;          // exchanges recorded
  std::vector<nlohmann::json> m_replay;  // the recorded exchanges that were forwarded, in order
  size_t m_replay_next = 0;
  bool m_finished = false;
};

// The recorded exchanges of an attempt (exchanges.jsonl), in order; DataError naming the file when one does not parse.
std::vector<nlohmann::json> read_model_exchanges(const std::filesystem::path& record_dir);
// The same from the file's text, read once by the caller (`file` names it in errors).
std::vector<nlohmann::json> parse_model_exchanges(const std::string& text, const std::filesystem::path& file);

}  // namespace kwb
