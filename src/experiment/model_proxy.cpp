#include "experiment/model_proxy.h"

#include "util/error.h"
#include "util/fd.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/sha256.h"
#include "util/timing_lock.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string_view>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace kwb {

namespace fs = std::filesystem;

namespace {

constexpr size_t k_max_head_bytes = 64 << 10;
constexpr size_t k_max_response_bytes = 64u << 20;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 502:
      return "Bad Gateway";
    default:
      return "Status";
  }
}

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the generator hung up: its loss
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// The headers the generator may not set on a forwarded request: hop-by-hop ones, the length (libcurl sets it), and
// every place a key goes (the proxy's to set).
bool is_dropped_header(const std::string& name) {
  static const char* const k_dropped[] = {"host",
                                          "content-length",
                                          "connection",
                                          "keep-alive",
                                          "transfer-encoding",
                                          "te",
                                          "upgrade",
                                          "proxy-authorization",
                                          "proxy-connection",
                                          "expect",
                                          "accept-encoding",
                                          "authorization",
                                          "x-api-key",
                                          "api-key",
                                          "x-goog-api-key"};
  return std::any_of(std::begin(k_dropped), std::end(k_dropped), [&](const char* d) { return name == d; });
}

// libcurl, opened at run time like the device runtimes (backend/opencl_api.h): kwb starts and runs everything else
// on a machine without it, and only an arm that calls a model needs it.
struct Curl {
  decltype(&curl_global_init) global_init = nullptr;
  decltype(&curl_easy_init) init = nullptr;
  decltype(&curl_easy_setopt) setopt = nullptr;
  decltype(&curl_easy_perform) perform = nullptr;
  decltype(&curl_easy_getinfo) getinfo = nullptr;
  decltype(&curl_easy_cleanup) cleanup = nullptr;
  decltype(&curl_easy_strerror) strerror = nullptr;
  decltype(&curl_slist_append) slist_append = nullptr;
  decltype(&curl_slist_free_all) slist_free_all = nullptr;
  std::string error;

  static const Curl& get() {
    static const Curl curl = load();
    return curl;
  }

private:
  static Curl load() {
    Curl c;
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      c.error = fmt::format("libcurl.so.4 cannot be opened ({}): install libcurl4", ::dlerror());
      return c;
    }
    const auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (fn == nullptr && c.error.empty()) c.error = fmt::format("libcurl.so.4 has no {}", name);
    };
    bind(c.global_init, "curl_global_init");
    bind(c.init, "curl_easy_init");
    bind(c.setopt, "curl_easy_setopt");
    bind(c.perform, "curl_easy_perform");
    bind(c.getinfo, "curl_easy_getinfo");
    bind(c.cleanup, "curl_easy_cleanup");
    bind(c.strerror, "curl_easy_strerror");
    bind(c.slist_append, "curl_slist_append");
    bind(c.slist_free_all, "curl_slist_free_all");
    if (c.error.empty() && c.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) c.error = "curl_global_init failed";
    return c;
  }
};

size_t append_body(char* data, size_t size, size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t n = size * count;
  if (body->size() + n > k_max_response_bytes) return 0;  // too large: the transfer fails
  body->append(data, n);
  return n;
}

}  // namespace

HttpParse parse_http_request(std::string_view raw, size_t max_body_bytes) {
  HttpParse out;
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    if (raw.size() > k_max_head_bytes) {
      out.error_status = 413;
      out.why = fmt::format("the request's head is over {} bytes", k_max_head_bytes);
    }
    return out;
  }
  const std::string_view head = raw.substr(0, head_end);
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    out.error_status = 400;
    out.why = "the request line is not 'METHOD /endpoint/path HTTP/1.1'";
    return out;
  }
  HttpRequest r;
  r.method = std::string(line.substr(0, sp1));
  r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  if (r.method != "GET" && r.method != "POST") {
    out.error_status = 405;
    out.why = fmt::format("method {} is not forwarded: use GET or POST", r.method);
    return out;
  }
  std::optional<size_t> length;
  size_t at = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (at < head.size()) {
    size_t end = head.find("\r\n", at);
    if (end == std::string_view::npos) end = head.size();
    const std::string_view h = head.substr(at, end - at);
    at = end + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      out.error_status = 400;
      out.why = "a header line has no name: 'Name: value'";
      return out;
    }
    std::string name = lower(std::string(trim(h.substr(0, colon))));
    std::string value(trim(h.substr(colon + 1)));
    if (name == "transfer-encoding") {
      out.error_status = 411;
      out.why = "a chunked request body is not accepted: send it with a Content-Length";
      return out;
    }
    if (name == "content-length") {
      size_t n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size()) {
        out.error_status = 400;
        out.why = "Content-Length is not a number";
        return out;
      }
      length = n;
    }
    r.headers.emplace_back(std::move(name), std::move(value));
  }
  const size_t want = length.value_or(0);
  if (want > max_body_bytes) {
    out.error_status = 413;
    out.why = fmt::format("the request's body ({} bytes) is over the proxy's {} bytes", want, max_body_bytes);
    return out;
  }
  const size_t body_at = head_end + 4;
  if (raw.size() - body_at < want) return out;  // more to come
  r.body = std::string(raw.substr(body_at, want));
  out.request = std::move(r);
  return out;
}

UpstreamResponse forward_with_curl(const ModelEndpoint& endpoint, const HttpRequest& request, const std::string& path,
                                   const std::string& key) {
  UpstreamResponse out;
  const Curl& c = Curl::get();
  if (!c.error.empty()) {
    out.error = c.error;
    return out;
  }
  CURL* h = c.init();
  if (h == nullptr) {
    out.error = "curl_easy_init failed";
    return out;
  }
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    if (!is_dropped_header(name)) headers = c.slist_append(headers, (name + ": " + value).c_str());
  }
  headers = c.slist_append(headers, "Expect:");
  if (!key.empty()) {
    const std::string line =
        endpoint.key_header == "authorization" ? "Authorization: Bearer " + key : endpoint.key_header + ": " + key;
    headers = c.slist_append(headers, line.c_str());
  }
  const std::string url = endpoint.url + path;
  std::string content_type;
  c.setopt(h, CURLOPT_URL, url.c_str());
  c.setopt(h, CURLOPT_NOSIGNAL, 1L);
  c.setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  c.setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  c.setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
  c.setopt(h, CURLOPT_TIMEOUT, 900L);
  c.setopt(h, CURLOPT_HTTPHEADER, headers);
  if (request.method == "POST") {
    c.setopt(h, CURLOPT_POST, 1L);
    c.setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    c.setopt(h, CURLOPT_POSTFIELDS, request.body.data());
  } else {
    c.setopt(h, CURLOPT_HTTPGET, 1L);
  }
  c.setopt(h, CURLOPT_WRITEFUNCTION, &append_body);
  c.setopt(h, CURLOPT_WRITEDATA, &out.body);
  const CURLcode rc = c.perform(h);
  if (rc != CURLE_OK) {
    out.error = fmt::format("{}: {}", url, c.strerror(rc));
    out.body.clear();
  } else {
    long status = 0;
    char* type = nullptr;
    c.getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    c.getinfo(h, CURLINFO_CONTENT_TYPE, &type);
    out.status = static_cast<int>(status);
    if (type != nullptr) out.content_type = type;
  }
  c.slist_free_all(headers);
  c.cleanup(h);
  return out;
}

nlohmann::json spend_json(const ModelSpend& s) {
  return {{"requests", s.requests},
          {"input_tokens", s.input_tokens},
          {"output_tokens", s.output_tokens},
          {"usd", s.usd},
          {"unpriced", s.unpriced}};
}

ModelSpend spend_from_json(const nlohmann::json& j) {
  ModelSpend s;
  if (!j.is_object()) return s;
  s.requests = j.value("requests", std::uint64_t{0});
  s.input_tokens = j.value("input_tokens", std::uint64_t{0});
  s.output_tokens = j.value("output_tokens", std::uint64_t{0});
  s.usd = j.value("usd", 0.0);
  s.unpriced = j.value("unpriced", std::vector<std::string>{});
  return s;
}

namespace {

// The spend file under flock: read it, and when `add` is given, add to it and rewrite it in place.
ModelSpend locked_spend(const fs::path& file, const std::function<void(ModelSpend&)>& add) {
  fs::create_directories(file.parent_path());
  UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) throw Error(ExitCode::io_error, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  while (::flock(fd.get(), LOCK_EX) != 0 && errno == EINTR) {
  }
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::pread(fd.get(), buffer, sizeof buffer, static_cast<off_t>(text.size()))) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  ModelSpend s = spend_from_json(nlohmann::json::parse(text, nullptr, false));
  if (add) {
    add(s);
    const std::string out = json_text(spend_json(s), 2) + "\n";
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), out.data(), out.size(), 0) != static_cast<ssize_t>(out.size())) {
      throw Error(ExitCode::io_error, fmt::format("{}: cannot write: {}", file.string(), std::strerror(errno)));
    }
  }
  return s;  // the lock goes with the descriptor
}

}  // namespace

ModelSpend ArmSpendFile::read() const { return locked_spend(m_file, {}); }

ModelSpend ArmSpendFile::add(const ModelUsage& usage, const std::vector<ModelPrice>& prices) const {
  return locked_spend(m_file, [&](ModelSpend& s) { s.add(usage, prices); });
}

nlohmann::json ModelProxyReport::json() const {
  nlohmann::json j = spend_json(spend);
  j["refused"] = refused;
  j["checks"] = checks;
  j["over_budget"] = over_budget;
  j["unnamed"] = unnamed;
  j["replay_problem"] = replay_problem;
  return j;
}

std::vector<nlohmann::json> parse_model_exchanges(const std::string& text, const fs::path& file) {
  std::vector<nlohmann::json> out;
  size_t at = 0;
  for (int n = 1; at < text.size(); ++n) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) throw DataError(fmt::format("{}:{}: not a JSON object", file.string(), n));
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<nlohmann::json> read_model_exchanges(const fs::path& record_dir) {
  const fs::path file = record_dir / "exchanges.jsonl";
  if (!fs::is_regular_file(file)) return {};
  return parse_model_exchanges(read_file(file), file);
}

ModelProxy::ModelProxy(ModelProxyConfig config) : m_config(std::move(config)) {
  if (!m_config.forward) m_config.forward = forward_with_curl;
  if (m_config.replay_dir) {
    // Read once, and believed only with the digest the recorded trajectory sealed (an attempt that made no request
    // has no file: its digest is that of nothing).
    const fs::path file = *m_config.replay_dir / "exchanges.jsonl";
    const std::string text = fs::is_regular_file(file) ? read_file(file) : "";
    if (sha256_hex(text) != m_config.replay_sha256) {
      throw DataError(
          fmt::format("{}: not the exchanges the recorded trajectory sealed (SHA-256 {}, sealed {}): the "
                      "recording was changed after it was made; replay from an unchanged copy",
                      file.string(), sha256_hex(text).substr(0, 16), m_config.replay_sha256.substr(0, 16)));
    }
    for (nlohmann::json& e : parse_model_exchanges(text, file)) {
      if (e.value("forwarded", false)) m_replay.push_back(std::move(e));
    }
  }
  const std::string path = socket_path().string();
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    throw Error(ExitCode::internal,
                fmt::format("the model proxy's socket path {} is longer than a Unix socket's {} bytes", path,
                            sizeof addr.sun_path - 1));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  m_listen = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  m_wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m_stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  m_service = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m_listen < 0 || m_wake < 0 || m_stop < 0 || m_service < 0 ||
      ::bind(m_listen, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(m_listen, 16) != 0 ||
      ::chmod(path.c_str(), 0666) != 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {m_listen, m_wake, m_stop, m_service}) {
      if (fd >= 0) ::close(fd);
    }
    throw Error(ExitCode::io_error, fmt::format("the model proxy cannot listen on {}: {}", path, why));
  }
  m_thread = std::thread([this] { serve(); });
}

ModelProxy::~ModelProxy() {
  (void)finish();
  for (int fd : {m_listen, m_wake, m_stop, m_service}) {
    if (fd >= 0) ::close(fd);
  }
}

ModelProxyReport ModelProxy::finish() {
  if (!m_finished) {
    m_finished = true;
    {
      // A check still waiting for the main thread will not get it: answered, so that the thread can end.
      std::lock_guard<std::mutex> lock(m_mutex);
      m_main_gone = true;
      for (CheckJob* job : m_jobs) {
        job->result = refuse(503, "kwb_attempt_over", "the attempt ended before its check ran");
      }
      m_jobs.clear();
    }
    m_job_done.notify_all();
    const std::uint64_t one = 1;
    (void)!::write(m_wake, &one, sizeof one);
    if (m_thread.joinable()) m_thread.join();
    ::unlink(socket_path().c_str());
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_report;
}

void ModelProxy::stop_attempt() {
  const std::uint64_t one = 1;
  (void)!::write(m_stop, &one, sizeof one);
}

void ModelProxy::serve() {
  for (;;) {
    pollfd polls[2] = {{m_listen, POLLIN, 0}, {m_wake, POLLIN, 0}};
    if (::poll(polls, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (polls[1].revents != 0) return;
    if ((polls[0].revents & POLLIN) == 0) continue;
    UniqueFd connection(::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection.valid()) continue;
    // A generator that connects and says nothing holds the proxy for 60 s at most.
    const timeval limit{60, 0};
    ::setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(connection.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    try {
      handle(connection.get());
    } catch (const std::exception& e) {
      // kwb's own failure (a record that cannot be written): the generator gets 502, the attempt its error.
      const std::string body = json_text({{"error", {{"type", "kwb_proxy_error"}, {"message", e.what()}}}});
      write_all(connection.get(), fmt::format("HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
                                              "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                                              body.size(), body));
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_report.replay_problem.empty() && m_config.replay_dir) m_report.replay_problem = e.what();
    }
  }
}

void ModelProxy::handle(int connection) {
  std::string raw;
  HttpParse parsed;
  char buffer[65536];
  for (;;) {
    parsed = parse_http_request(raw, m_config.max_request_bytes);
    if (parsed.request || parsed.error_status != 0) break;
    const ssize_t n = ::recv(connection, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or silent: nothing was asked
    raw.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  UpstreamResponse response;
  if (!parsed.request) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      ++m_report.refused;
    }
    response = refuse(parsed.error_status, "kwb_bad_request", parsed.why);
    status = parsed.error_status;
  } else {
    std::tie(status, response) = answer(*parsed.request);
  }
  const std::string type = response.content_type.empty() ? "application/json" : response.content_type;
  write_all(connection, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: "
                                    "close\r\n\r\n",
                                    status, reason_phrase(status), type, response.body.size()));
  write_all(connection, response.body);
}

UpstreamResponse ModelProxy::refuse(int status, const std::string& type, const std::string& message) {
  UpstreamResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = json_text({{"error", {{"type", type}, {"message", message}}}});
  return r;
}

std::string ModelProxy::budget_refusal() {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_report.over_budget.empty()) return m_report.over_budget;
    why = refuse_next_request(m_config.attempt_budget, m_report.spend);
  }
  if (!why.empty()) return "the attempt's budget: " + why;
  why = refuse_next_request(m_config.arm_budget, ArmSpendFile(m_config.arm_spend_file).read());
  return why.empty() ? "" : "the arm's budget: " + why;
}

std::optional<UpstreamResponse> ModelProxy::replayed(const HttpRequest& request, const std::string& endpoint,
                                                     std::string& problem) {
  const std::string request_sha = sha256_hex(request.body);
  if (m_replay_next >= m_replay.size()) {
    problem =
        fmt::format("request {} has no recorded answer: the recording holds {}", m_replay_next + 1, m_replay.size());
    return std::nullopt;
  }
  const nlohmann::json& e = m_replay[m_replay_next];
  if (e.value("endpoint", "") != endpoint || e.value("method", "") != request.method ||
      e.value("target", "") != request.target || e.value("request_sha256", "") != request_sha) {
    problem = fmt::format("request {} ({} {}) is not the recorded one ({} {}, body SHA-256 {}{})", m_replay_next + 1,
                          request.method, request.target, e.value("method", ""), e.value("target", ""),
                          e.value("request_sha256", "").substr(0, 12),
                          e.value("request_sha256", "") == request_sha ? ", same body" : ", another body");
    return std::nullopt;
  }
  ++m_replay_next;
  UpstreamResponse response;
  response.status = e.value("status", 0);
  response.content_type = e.value("content_type", "");
  response.error = e.value("error", "");
  const fs::path body = *m_config.replay_dir / e.value("response_file", "");
  response.body = fs::is_regular_file(body) ? read_file(body) : "";
  if (sha256_hex(response.body) != e.value("response_sha256", "")) {
    throw DataError(fmt::format("{}: not the recorded response of exchange {} (its SHA-256 differs)", body.string(),
                                e.value("sequence", 0)));
  }
  return response;
}

UpstreamResponse ModelProxy::forwarded(const ModelEndpoint& endpoint, const HttpRequest& request,
                                       const std::string& path) {
  // What the endpoint is sent: the generator's headers but those the proxy owns (a key of the generator's own, the
  // framing), so that no forward, libcurl's or a test's, sees them.
  HttpRequest outgoing = request;
  std::erase_if(outgoing.headers, [](const auto& h) { return is_dropped_header(h.first); });
  const auto key = std::find_if(m_config.secrets.begin(), m_config.secrets.end(),
                                [&](const Secret& s) { return s.name == endpoint.key_env; });
  UpstreamResponse response = m_config.forward(
      endpoint, outgoing, path, key == m_config.secrets.end() || endpoint.key_env.empty() ? "" : key->value);
  // An answer that echoes the key (a misbehaving endpoint, a debugging echo) reaches neither the generator nor a
  // record.
  response.body = redact(std::move(response.body), m_config.secrets);
  response.error = redact(std::move(response.error), m_config.secrets);
  return response;
}

std::pair<int, UpstreamResponse> ModelProxy::answer(const HttpRequest& request) {
  // The endpoint: the path's first component.
  const std::string& target = request.target;
  const size_t slash = target.size() > 1 ? target.find_first_of("/?", 1) : std::string::npos;
  const std::string name =
      target.substr(target.empty() ? 0 : 1, slash == std::string::npos ? std::string::npos : slash - 1);
  const std::string path = slash == std::string::npos ? "" : target.substr(slash);
  const auto endpoint = std::find_if(m_config.endpoints.begin(), m_config.endpoints.end(),
                                     [&](const ModelEndpoint& e) { return e.name == name; });
  const auto refused = [&](int status, const std::string& type, const std::string& why) {
    return this->refused(request, name, status, type, why);
  };
  if (name == "kwb") return answer_kwb(request, path);
  if (target.empty() || target.front() != '/' || endpoint == m_config.endpoints.end()) {
    // Asking for a host the arm did not name is a reach outside what it may see, as a network socket is: refused,
    // recorded, and the attempt ends.
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_report.unnamed.empty()) m_report.unnamed = target;
    }
    stop_attempt();
    std::vector<std::string> names;
    for (const ModelEndpoint& e : m_config.endpoints) names.push_back("/" + e.name + "/...");
    return refused(404, "kwb_unknown_endpoint",
                   fmt::format("'{}' names no endpoint of this arm: the path starts with one of {}", target,
                               fmt::join(names, ", ")));
  }
  // The budgets, before anything is sent: this attempt's, then the arm's (every trajectory's together).
  if (const std::string why = budget_refusal(); !why.empty()) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_report.over_budget.empty()) m_report.over_budget = why;
    }
    stop_attempt();
    return refused(429, "kwb_budget", why + " (the attempt ends as `budget`)");
  }

  const auto started = std::chrono::steady_clock::now();
  UpstreamResponse response;
  if (m_config.replay_dir) {
    std::string problem;
    std::optional<UpstreamResponse> r = replayed(request, name, problem);
    if (!r) {
      {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_report.replay_problem.empty()) m_report.replay_problem = problem;
      }
      stop_attempt();
      return refused(409, "kwb_replay_diverged", "the replay diverged: " + problem);
    }
    response = std::move(*r);
  } else {
    response = forwarded(*endpoint, request, path);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  account(request, name, response, seconds);
  if (response.status == 0)
    return {502, refuse(502, "kwb_upstream_error", "the endpoint did not answer: " + response.error)};
  return {response.status, response};
}

std::pair<int, UpstreamResponse> ModelProxy::refused(const HttpRequest& request, const std::string& endpoint,
                                                     int status, const std::string& type, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    ++m_report.refused;
  }
  UpstreamResponse r = refuse(status, type, why);
  record(request, endpoint, r, {}, std::nullopt, 0.0, why);
  return {status, r};
}

std::pair<int, UpstreamResponse> ModelProxy::answer_kwb(const HttpRequest& request, const std::string& path) {
  if (path != "/check" || request.method != "POST" || !m_config.check) {
    return refused(request, "kwb", 404, "kwb_unknown_endpoint",
                   "kwb's own endpoint answers POST /kwb/check, a candidate's whole source as the body, with "
                   "kwb check's result on the task's published cases");
  }
  bool over = false;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    over = m_report.checks >= m_config.max_checks;
  }
  if (over) {
    return refused(
        request, "kwb", 429, "kwb_check_limit",
        fmt::format("{} checks per attempt already run: write the candidate to KWB_OUTPUT", m_config.max_checks));
  }
  const auto started = std::chrono::steady_clock::now();
  UpstreamResponse response;
  if (m_config.replay_dir) {
    std::string problem;
    std::optional<UpstreamResponse> r = replayed(request, "kwb", problem);
    if (!r) {
      {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_report.replay_problem.empty()) m_report.replay_problem = problem;
      }
      stop_attempt();
      return refused(request, "kwb", 409, "kwb_replay_diverged", "the replay diverged: " + problem);
    }
    response = std::move(*r);
  } else {
    response = check_on_main_thread(request.body);
  }
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    ++m_report.checks;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  record(request, "kwb", response, {}, std::nullopt, seconds, "");
  return {response.status == 0 ? 502 : response.status, response};
}

UpstreamResponse ModelProxy::check_on_main_thread(const std::string& source) {
  CheckJob job{source, std::nullopt};
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_main_gone) return refuse(503, "kwb_attempt_over", "the attempt is over: no check runs any more");
    m_jobs.push_back(&job);
  }
  const std::uint64_t one = 1;
  (void)!::write(m_service, &one, sizeof one);
  std::unique_lock<std::mutex> lock(m_mutex);
  m_job_done.wait(lock, [&] { return job.result.has_value(); });
  return *job.result;
}

void ModelProxy::serve_main_thread() {
  std::uint64_t count = 0;
  (void)!::read(m_service, &count, sizeof count);
  for (;;) {
    CheckJob* job = nullptr;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_jobs.empty()) return;
      job = m_jobs.front();
      m_jobs.pop_front();
    }
    UpstreamResponse r;
    try {
      r = m_config.check(job->source);
    } catch (const std::exception& e) {
      r = refuse(502, "kwb_check_error", std::string("kwb could not run the check: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      job->result = std::move(r);
    }
    m_job_done.notify_all();
  }
}

void ModelProxy::account(const HttpRequest& request, const std::string& endpoint, const UpstreamResponse& response,
                         double seconds) {
  const ModelUsage usage = parse_model_usage(response.body);
  const ModelSpend arm = ArmSpendFile(m_config.arm_spend_file).add(usage, m_config.prices);
  std::string over;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_report.spend.add(usage, m_config.prices);
    if (std::string a = over_budget(m_config.attempt_budget, m_report.spend); !a.empty()) {
      over = "the attempt's budget: " + a;
    } else if (std::string b = over_budget(m_config.arm_budget, arm); !b.empty()) {
      over = "the arm's budget: " + b;
    }
    if (!over.empty() && m_report.over_budget.empty()) m_report.over_budget = over;
  }
  record(request, endpoint, response, usage, price_usd(usage, m_config.prices), seconds, "");
  if (!over.empty()) stop_attempt();
}

void ModelProxy::record(const HttpRequest& request, const std::string& endpoint, const UpstreamResponse& response,
                        const ModelUsage& usage, std::optional<double> usd, double seconds,
                        const std::string& refused) {
  const std::uint64_t n = ++m_sequence;
  fs::create_directories(m_config.record_dir);
  const std::string request_file = fmt::format("{:04}.request", n);
  const std::string response_file = fmt::format("{:04}.response", n);
  const std::string request_body = redact(request.body, m_config.secrets);
  write_file_atomic(m_config.record_dir / request_file, request_body);
  write_file_atomic(m_config.record_dir / response_file, response.body);
  nlohmann::json headers = nlohmann::json::object();
  for (const auto& [k, v] : request.headers) {
    if (!is_dropped_header(k)) headers[k] = redact(v, m_config.secrets);
  }
  const nlohmann::json line = {
      {"sequence", n},
      {"time", clock_time(unix_now_ns())},
      {"endpoint", endpoint},
      {"method", request.method},
      {"target", request.target},
      {"headers", headers},
      {"forwarded", refused.empty()},
      {"refused", refused},
      {"request_bytes", request.body.size()},
      {"request_sha256", sha256_hex(request.body)},
      {"request_file", request_file},
      {"status", response.status},
      {"content_type", response.content_type},
      {"error", response.error},
      {"response_bytes", response.body.size()},
      {"response_sha256", sha256_hex(response.body)},
      {"response_file", response_file},
      {"seconds", seconds},
      {"usage",
       {{"found", usage.found},
        {"model", usage.model},
        {"input_tokens", usage.input_tokens},
        {"output_tokens", usage.output_tokens}}},
      {"usd", usd ? nlohmann::json(*usd) : nlohmann::json(nullptr)},
  };
  std::ofstream out(m_config.record_dir / "exchanges.jsonl", std::ios::app);
  out << json_text(line) << "\n";
  out.flush();
  if (!out) {
    throw Error(ExitCode::io_error,
                fmt::format("{}: cannot append the exchange", (m_config.record_dir / "exchanges.jsonl").string()));
  }
}

}  // namespace kwb
