// An arm's one way out (experiment/model_proxy.h), driven through its Unix socket as a generator drives it, with the
// endpoint replaced by a function that records what it was sent: only named endpoints are reached, the key is added
// by the proxy and never reaches the generator or a record, every exchange is recorded with its usage, budgets per
// attempt and per arm end the attempt, and a replay answers from the record without calling anything.
#include "experiment/model_proxy.h"

#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace kwb {
namespace {

namespace fs = std::filesystem;

struct Reply {
  int status = 0;
  std::string body;
};

// One request through the socket, as a generator sends it: HTTP/1.1, one request per connection.
Reply call(const fs::path& socket_path, const std::string& method, const std::string& target, const std::string& body,
           const std::string& extra_headers = "") {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: kwb\r\nContent-Type: application/json\r\n" +
                              extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) raw.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  Reply r;
  if (raw.size() > 12) r.status = std::stoi(raw.substr(9, 3));
  const size_t at = raw.find("\r\n\r\n");
  if (at != std::string::npos) r.body = raw.substr(at + 4);
  return r;
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// An OpenAI chat completion, with usage; it echoes the key it was sent, as a careless endpoint might.
std::string completion(const std::string& text, int in, int out, const std::string& echoed_key) {
  return nlohmann::json({{"model", "gpt-test-1"},
                         {"choices", {{{"message", {{"role", "assistant"}, {"content", text}}}}}},
                         {"usage", {{"prompt_tokens", in}, {"completion_tokens", out}}},
                         {"echo", echoed_key}})
      .dump();
}

struct Sent {
  std::string path, key, body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ModelProxyTest : public ::testing::Test {
protected:
  ModelProxyConfig config(const std::string& attempt) {
    ModelProxyConfig c;
    c.endpoints = {{"openai", "https://api.example.invalid", "FAKE_API_KEY", "authorization"}};
    c.prices = {{"gpt-test*", 1.0, 10.0}};
    c.arm_spend_file = m_dir / "spend" / "arm.json";
    c.record_dir = m_dir / attempt / "model";
    c.socket_dir = m_dir / (attempt + "-socket");
    fs::create_directories(c.socket_dir);
    c.secrets = {{"FAKE_API_KEY", m_key}};
    c.forward = [this](const ModelEndpoint&, const HttpRequest& request, const std::string& path,
                       const std::string& key) {
      m_sent.push_back({path, key, request.body, request.headers});
      UpstreamResponse r;
      r.status = 200;
      r.content_type = "application/json";
      r.body = completion("kernel v" + std::to_string(m_sent.size()), 100, 50, key);
      return r;
    };
    return c;
  }

  test::TempDir m_dir{"kwb-model-proxy"};
  const std::string m_key = "sk-test-0123456789abcdef";
  std::vector<Sent> m_sent;
};

TEST(ModelProxyParse, a_request_is_complete_with_its_body_and_malformed_ones_get_their_status) {
  const std::string head = "POST /a/v1/x HTTP/1.1\r\nContent-Length: 5\r\nX-Thing:  v \r\n\r\n";
  EXPECT_FALSE(parse_http_request(head + "abc", 100).request);  // the body is still coming
  EXPECT_EQ(parse_http_request(head + "abc", 100).error_status, 0);
  const HttpParse whole = parse_http_request(head + "abcde", 100);
  ASSERT_TRUE(whole.request);
  EXPECT_EQ(whole.request->method, "POST");
  EXPECT_EQ(whole.request->target, "/a/v1/x");
  EXPECT_EQ(whole.request->body, "abcde");
  EXPECT_EQ(whole.request->headers[1], (std::pair<std::string, std::string>{"x-thing", "v"}));
  EXPECT_EQ(parse_http_request(head + "abcde", 4).error_status, 413);
  EXPECT_EQ(parse_http_request("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 100).error_status, 411);
  EXPECT_EQ(parse_http_request("PUT /a HTTP/1.1\r\n\r\n", 100).error_status, 405);
  EXPECT_EQ(parse_http_request("hello\r\n\r\n", 100).error_status, 400);
  EXPECT_EQ(parse_http_request("POST /a HTTP/1.1\r\nContent-Length: x\r\n\r\n", 100).error_status, 400);
  EXPECT_EQ(parse_http_request(std::string(70000, 'a'), 100).error_status, 413);
}

TEST_F(ModelProxyTest, a_named_endpoint_gets_the_key_from_the_proxy_and_nothing_else_holds_it) {
  ModelProxy proxy(config("1"));
  // The generator tries to send a key of its own: dropped; the proxy's goes instead.
  const Reply r = call(proxy.socket_path(), "POST", "/openai/v1/chat/completions?beta=1", R"({"model":"gpt-test-1"})",
                       "Authorization: Bearer stolen\r\nX-Trace: 7\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(m_sent.size(), 1u);
  EXPECT_EQ(m_sent[0].path, "/v1/chat/completions?beta=1");
  EXPECT_EQ(m_sent[0].key, m_key);
  EXPECT_EQ(m_sent[0].body, R"({"model":"gpt-test-1"})");
  EXPECT_EQ(std::count_if(m_sent[0].headers.begin(), m_sent[0].headers.end(),
                          [](const auto& h) { return h.second.find("stolen") != std::string::npos; }),
            0)
      << "the generator's own Authorization header must not be forwarded";
  EXPECT_NE(std::find(m_sent[0].headers.begin(), m_sent[0].headers.end(),
                      std::pair<std::string, std::string>{"x-trace", "7"}),
            m_sent[0].headers.end());
  // The endpoint echoed the key: the generator sees it redacted.
  EXPECT_EQ(r.body.find(m_key), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("[redacted:FAKE_API_KEY]"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("kernel v1"), std::string::npos);

  // Not an endpoint of the arm: 404, nothing sent, and the attempt is told to end (a reach outside its view).
  EXPECT_FALSE(readable(proxy.stop_fd()));
  EXPECT_EQ(call(proxy.socket_path(), "POST", "/anthropic/v1/messages", "{}").status, 404);
  EXPECT_TRUE(readable(proxy.stop_fd()));
  EXPECT_EQ(call(proxy.socket_path(), "GET", "/", "").status, 404);
  EXPECT_EQ(m_sent.size(), 1u);

  const ModelProxyReport report = proxy.finish();
  EXPECT_EQ(report.spend.requests, 1u);
  EXPECT_EQ(report.spend.input_tokens, 100u);
  EXPECT_EQ(report.spend.output_tokens, 50u);
  EXPECT_DOUBLE_EQ(report.spend.usd, (100 * 1.0 + 50 * 10.0) / 1e6);
  EXPECT_EQ(report.refused, 2u);
  EXPECT_EQ(report.unnamed, "/anthropic/v1/messages");
  EXPECT_TRUE(report.over_budget.empty());
  EXPECT_FALSE(fs::exists(proxy.socket_path()));

  const std::vector<nlohmann::json> ex = read_model_exchanges(m_dir / "1" / "model");
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(ex[0]["endpoint"], "openai");
  EXPECT_EQ(ex[0]["forwarded"], true);
  EXPECT_EQ(ex[0]["status"], 200);
  EXPECT_EQ(ex[0]["usage"]["output_tokens"], 50);
  EXPECT_EQ(ex[0]["headers"].value("x-trace", ""), "7");
  EXPECT_FALSE(ex[0]["headers"].contains("authorization"));
  EXPECT_EQ(read_file(m_dir / "1" / "model" / ex[0]["request_file"].get<std::string>()), R"({"model":"gpt-test-1"})");
  EXPECT_EQ(ex[1]["forwarded"], false);
  EXPECT_EQ(ex[1]["status"], 404);
  // No file of the record holds the key, nor "stolen"'s header.
  for (const auto& e : fs::recursive_directory_iterator(m_dir.path())) {
    if (!e.is_regular_file()) continue;
    const std::string text = read_file(e.path());
    EXPECT_EQ(text.find(m_key), std::string::npos) << e.path();
    EXPECT_EQ(text.find("stolen"), std::string::npos) << e.path();
  }
}

TEST_F(ModelProxyTest, past_the_attempts_budget_a_request_is_refused_and_the_attempt_told_to_end) {
  ModelProxyConfig c = config("1");
  c.attempt_budget.requests = 2;
  ModelProxy proxy(std::move(c));
  EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}").status, 200);
  EXPECT_FALSE(readable(proxy.stop_fd()));
  EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}").status, 200);
  EXPECT_FALSE(readable(proxy.stop_fd()));
  const Reply third = call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}");
  EXPECT_EQ(third.status, 429);
  EXPECT_NE(third.body.find("kwb_budget"), std::string::npos) << third.body;
  EXPECT_TRUE(readable(proxy.stop_fd()));
  EXPECT_EQ(m_sent.size(), 2u);
  const ModelProxyReport report = proxy.finish();
  EXPECT_EQ(report.over_budget, "the attempt's budget: requests: 2 of 2 already sent");
  EXPECT_EQ(report.spend.requests, 2u);
}

TEST_F(ModelProxyTest, an_answer_past_a_token_or_money_budget_ends_the_attempt_and_the_arms_budget_spans_attempts) {
  {
    ModelProxyConfig c = config("1");
    c.attempt_budget.output_tokens = 40;  // one answer has 50
    ModelProxy proxy(std::move(c));
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}").status, 200);
    EXPECT_TRUE(readable(proxy.stop_fd()));
    EXPECT_EQ(proxy.finish().over_budget, "the attempt's budget: output_tokens: 50 of 40");
  }
  // The arm's money: 0.0006 USD an answer, 0.001 for the arm. The first attempt spent 0.0006 above; this one's first
  // answer takes the arm to 0.0012, past it: the attempt ends, and a third attempt is refused at its first request.
  {
    ModelProxyConfig c = config("2");
    c.arm_budget.usd = 0.001;
    ModelProxy proxy(std::move(c));
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}").status, 200);
    EXPECT_TRUE(readable(proxy.stop_fd()));
    EXPECT_EQ(proxy.finish().over_budget, "the arm's budget: usd: 0.0012 of 0.001");
  }
  {
    ModelProxyConfig c = config("3");
    c.arm_budget.usd = 0.001;
    ModelProxy proxy(std::move(c));
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", "{}").status, 429);
    EXPECT_EQ(m_sent.size(), 2u);
  }
  const ModelSpend arm = ArmSpendFile(m_dir / "spend" / "arm.json").read();
  EXPECT_EQ(arm.requests, 2u);
  EXPECT_NEAR(arm.usd, 0.0012, 1e-12);
}

TEST_F(ModelProxyTest, a_replay_answers_the_recorded_requests_in_order_without_calling_and_names_a_divergence) {
  std::vector<std::string> answers;
  {
    ModelProxy proxy(config("1"));
    for (const char* body : {R"({"n":1})", R"({"n":2})"}) {
      answers.push_back(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", body).body);
    }
  }
  ASSERT_EQ(m_sent.size(), 2u);
  const auto replay = [&](const std::string& attempt) {
    ModelProxyConfig c = config(attempt);
    c.replay_dir = m_dir / "1" / "model";
    c.replay_sha256 = sha256_hex(read_file(m_dir / "1" / "model" / "exchanges.jsonl"));  // as the record seals it
    c.secrets.clear();                                                                   // a replay holds no key
    c.forward = [](const ModelEndpoint&, const HttpRequest&, const std::string&, const std::string&) {
      ADD_FAILURE() << "a replay called the endpoint";
      return UpstreamResponse{};
    };
    return c;
  };
  {
    ModelProxy proxy(replay("2"));
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", R"({"n":1})").body, answers[0]);
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", R"({"n":2})").body, answers[1]);
    // One more than was recorded: no answer to give.
    EXPECT_EQ(call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", R"({"n":3})").status, 409);
    const ModelProxyReport report = proxy.finish();
    EXPECT_EQ(report.spend.requests, 2u);  // counted as the recording was
    EXPECT_EQ(report.spend.output_tokens, 100u);
    EXPECT_NE(report.replay_problem.find("request 3 has no recorded answer"), std::string::npos)
        << report.replay_problem;
  }
  {
    ModelProxy proxy(replay("3"));
    const Reply r = call(proxy.socket_path(), "POST", "/openai/v1/chat/completions", R"({"n":2})");
    EXPECT_EQ(r.status, 409);
    EXPECT_TRUE(readable(proxy.stop_fd()));
    EXPECT_NE(proxy.finish().replay_problem.find("another body"), std::string::npos);
  }
  // A recording changed after it was sealed (a line edited, so its answer's digest with it) is not served at all.
  ModelProxyConfig edited = replay("4");
  const fs::path file = m_dir / "1" / "model" / "exchanges.jsonl";
  std::string text = read_file(file);
  text.replace(text.find("\"status\":200"), 12, "\"status\":201");
  write_file_atomic(file, text);
  try {
    ModelProxy proxy(std::move(edited));
    ADD_FAILURE() << "an edited recording was served";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("not the exchanges the recorded trajectory sealed"), std::string::npos)
        << e.what();
  }
}

TEST_F(ModelProxyTest, a_feedback_check_runs_on_the_main_thread_is_recorded_and_limited_per_attempt) {
  ModelProxyConfig c = config("1");
  c.max_checks = 1;
  std::thread::id ran_on;
  c.check = [&](const std::string& source) {
    ran_on = std::this_thread::get_id();
    UpstreamResponse r;
    r.status = 200;
    r.content_type = "application/json";
    r.body = nlohmann::json({{"verdict", "FAIL"}, {"bytes", source.size()}}).dump();
    return r;
  };
  ModelProxy proxy(std::move(c));
  // The generator's call waits while kwb's main thread (this one, as run_generator's loop) runs the check.
  Reply first;
  std::thread generator([&] { first = call(proxy.socket_path(), "POST", "/kwb/check", "int x = ;"); });
  pollfd p{proxy.service_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "no check asked for the main thread";
  proxy.serve_main_thread();
  generator.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(nlohmann::json::parse(first.body)["bytes"], 9);
  // One per attempt here: the second is refused, and the attempt goes on.
  EXPECT_EQ(call(proxy.socket_path(), "POST", "/kwb/check", "x").status, 429);
  EXPECT_FALSE(readable(proxy.stop_fd()));
  EXPECT_EQ(call(proxy.socket_path(), "GET", "/kwb/other", "").status, 404);
  const ModelProxyReport report = proxy.finish();
  EXPECT_EQ(report.checks, 1u);
  EXPECT_EQ(report.spend.requests, 0u);  // a check is not a model request
  const std::vector<nlohmann::json> ex = read_model_exchanges(m_dir / "1" / "model");
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(ex[0]["endpoint"], "kwb");
  EXPECT_EQ(ex[0]["forwarded"], true);  // a replay serves it as recorded
  EXPECT_EQ(ex[1]["status"], 429);
}

TEST_F(ModelProxyTest, a_check_still_waiting_when_the_attempt_ends_is_answered_and_the_proxy_stops) {
  ModelProxyConfig c = config("1");
  c.check = [](const std::string&) {
    ADD_FAILURE() << "no check may run once the attempt is over";
    return UpstreamResponse{};
  };
  ModelProxy proxy(std::move(c));
  Reply r;
  std::thread generator([&] { r = call(proxy.socket_path(), "POST", "/kwb/check", "int x;"); });
  pollfd p{proxy.service_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  (void)proxy.finish();  // the generator's run ended (its limit) before the main thread served the check
  generator.join();
  EXPECT_EQ(r.status, 503);
}

}  // namespace
}  // namespace kwb
