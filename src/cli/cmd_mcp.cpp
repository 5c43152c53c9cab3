// kwb mcp: a Model Context Protocol server over stdio (JSON-RPC 2.0, one message per line) for agents
// (docs/agents.md). Each tools/call runs the verb as a child `kwb VERB ... --json` (cli/mcp_tools.h): the child's
// stdout is the result, its stderr lines become progress notifications when the client asked for them, and a
// notifications/cancelled ends the child's process group (kwb records the interruption as it does for SIGTERM).
// Calls may overlap; the timing lock keeps their timing stages apart. The server itself is one thread with one
// poll loop, so every child is started and reaped on kwb's main thread (util/interrupt.h).
#include "cli/commands.h"
#include "cli/mcp_tools.h"
#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/json_text.h"
#include "util/subprocess.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <map>
#include <optional>

namespace kwb::cli {

namespace {

// Protocol revisions this server speaks; the client's is echoed when it is one of them, else the newest is offered.
const char* const k_protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

constexpr int k_parse_error = -32700;
constexpr int k_invalid_request = -32600;
constexpr int k_method_not_found = -32601;
constexpr int k_invalid_params = -32602;
constexpr int k_internal_error = -32603;

// One tools/call running as a child.
struct Call {
  nlohmann::json id;
  std::string tool;
  nlohmann::json arguments;
  pid_t pid = -1;
  UniqueFd out, err;
  std::string out_text, err_text, err_line;
  nlohmann::json progress_token;  // null: the client asked for no progress
  int progress = 0;
  bool cancelled = false;
};

class Server {
public:
  explicit Server(std::string exe) : m_exe(std::move(exe)) {}

  int run() {
    std::string in;
    bool in_open = true;
    for (;;) {
      if (!in_open && m_calls.empty()) return 0;
      std::vector<pollfd> fds;
      std::vector<std::pair<std::string, bool>> owners;  // call key, is stdout
      if (in_open) {
        fds.push_back({0, POLLIN, 0});
        owners.emplace_back("", false);
      }
      for (auto& [key, c] : m_calls) {
        if (c.out.valid()) {
          fds.push_back({c.out.get(), POLLIN, 0});
          owners.emplace_back(key, true);
        }
        if (c.err.valid()) {
          fds.push_back({c.err.get(), POLLIN, 0});
          owners.emplace_back(key, false);
        }
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno != EINTR) throw InternalError(fmt::format("mcp: poll: {}", std::strerror(errno)));
        throw_if_interrupted();
        continue;
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[65536];
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        const bool eof = n <= 0;
        if (owners[i].first.empty()) {
          if (eof) {
            in_open = false;
            // The client is gone: nobody will read a result, so every running call is ended.
            for (auto& [key, c] : m_calls) cancel(c);
            continue;
          }
          in.append(buf, static_cast<size_t>(n));
          for (size_t nl; (nl = in.find('\n')) != std::string::npos;) {
            const std::string line = in.substr(0, nl);
            in.erase(0, nl + 1);
            if (line.find_first_not_of(" \t\r") != std::string::npos) handle(line);
          }
          continue;
        }
        auto it = m_calls.find(owners[i].first);
        if (it == m_calls.end()) continue;
        Call& c = it->second;
        if (owners[i].second) {
          if (eof) {
            c.out.reset();
          } else {
            c.out_text.append(buf, static_cast<size_t>(n));
          }
        } else {
          if (eof) {
            c.err.reset();
          } else {
            stderr_text(c, std::string(buf, static_cast<size_t>(n)));
          }
        }
      }
      for (auto it = m_calls.begin(); it != m_calls.end();) {
        if (it->second.out.valid() || it->second.err.valid()) {
          ++it;
          continue;
        }
        finish(it->second);
        it = m_calls.erase(it);
      }
    }
  }

private:
  void send(const nlohmann::json& message) {
    const std::string line = json_text(message) + "\n";
    size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(1, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(ExitCode::io_error, "mcp: the client's end of stdout is closed");
      off += static_cast<size_t>(n);
    }
  }
  void reply(const nlohmann::json& id, const nlohmann::json& result) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"result", result}});
  }
  void error(const nlohmann::json& id, int code, const std::string& message) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
  }

  void handle(const std::string& line) {
    const nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
    if (msg.is_discarded()) return error(nullptr, k_parse_error, "parse error: a message is one JSON object per line");
    if (!msg.is_object() || msg.value("jsonrpc", "") != "2.0" || !msg.contains("method") ||
        !msg["method"].is_string()) {
      if (msg.is_object() && !msg.contains("method") && (msg.contains("result") || msg.contains("error"))) return;
      return error(msg.is_object() && msg.contains("id") ? msg["id"] : nlohmann::json(), k_invalid_request,
                   "invalid request: a JSON-RPC 2.0 object with a string 'method' is expected");
    }
    const std::string method = msg["method"].get<std::string>();
    const nlohmann::json params = msg.contains("params") ? msg["params"] : nlohmann::json::object();
    if (!msg.contains("id")) return notification(method, params);
    const nlohmann::json& id = msg["id"];
    try {
      if (method == "initialize") return initialize(id, params);
      if (method == "ping") return reply(id, nlohmann::json::object());
      if (method == "tools/list") return reply(id, {{"tools", mcp::tool_list()}});
      if (method == "tools/call") return call(id, params);
      return error(id, k_method_not_found,
                   fmt::format("method '{}' is not offered by kwb (it offers initialize, "
                               "ping, tools/list and tools/call)",
                               method));
    } catch (const mcp::InvalidParams& e) {
      return error(id, k_invalid_params, e.what());
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      return error(id, k_internal_error, e.what());
    }
  }

  void notification(const std::string& method, const nlohmann::json& params) {
    if (method != "notifications/cancelled" || !params.is_object() || !params.contains("requestId")) return;
    if (auto it = m_calls.find(params["requestId"].dump()); it != m_calls.end()) cancel(it->second);
  }

  void initialize(const nlohmann::json& id, const nlohmann::json& params) {
    std::string version = k_protocol_versions[0];
    if (params.is_object() && params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
      for (const char* v : k_protocol_versions) {
        if (params["protocolVersion"] == v) version = v;
      }
    }
    reply(id, {{"protocolVersion", version},
               {"capabilities", {{"tools", {{"listChanged", false}}}}},
               {"serverInfo", {{"name", "kwb"}, {"version", KWB_VERSION}}},
               {"instructions",
                "kwb judges whether a candidate compute kernel should replace a baseline. check a "
                "candidate first (rejected code gets reasons and no metric), validate the ones "
                "that pass against the incumbent, keep a KEEP_CANDIDATE bundle. docs/agents.md."}});
  }

  void call(const nlohmann::json& id, const nlohmann::json& params) {
    if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
      throw mcp::InvalidParams("tools/call: 'name' (the tool) is required");
    }
    const std::string tool = params["name"].get<std::string>();
    const nlohmann::json args = params.contains("arguments") ? params["arguments"] : nlohmann::json::object();
    if (m_calls.contains(id.dump())) throw mcp::InvalidParams("tools/call: a call with this id is still running");
    if (mcp::runs_in_process(tool)) {
      const nlohmann::json out = mcp::list_tasks(args);
      return reply(
          id, tool_result(fmt::format("{} task(s)", out["tasks"].size()), mcp::structured_result(out, 0, ""), false));
    }
    std::vector<std::string> argv = mcp::tool_argv(tool, args);
    argv.insert(argv.begin(), m_exe);
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw InternalError(fmt::format("mcp: pipe: {}", std::strerror(errno)));
    }
    Call c;
    c.id = id;
    c.tool = tool;
    c.arguments = args;
    c.out.reset(out_pipe[0]);
    c.err.reset(err_pipe[0]);
    UniqueFd out_w(out_pipe[1]), err_w(err_pipe[1]);
    if (params.contains("_meta") && params["_meta"].is_object() && params["_meta"].contains("progressToken")) {
      c.progress_token = params["_meta"]["progressToken"];
    }
    int exec_errno = 0;
    ChildSpec child;
    child.argv = argv;
    child.stdout_fd = out_w.get();
    child.stderr_fd = err_w.get();
    c.pid = spawn_child(child, exec_errno);
    if (c.pid < 0) throw InternalError(fmt::format("mcp: cannot run {}: {}", m_exe, std::strerror(exec_errno)));
    m_calls.emplace(id.dump(), std::move(c));
  }

  // The child's stderr: progress lines, rewritten in place on a terminal ('\r'), become notifications.
  void stderr_text(Call& c, const std::string& text) {
    c.err_text += text;
    if (c.err_text.size() > 64 * 1024UL) c.err_text.erase(0, c.err_text.size() - 64 * 1024UL);
    for (char ch : text) {
      if (ch != '\n' && ch != '\r') {
        c.err_line += ch;
        continue;
      }
      if (!c.err_line.empty() && !c.progress_token.is_null()) {
        send({{"jsonrpc", "2.0"},
              {"method", "notifications/progress"},
              {"params", {{"progressToken", c.progress_token}, {"progress", ++c.progress}, {"message", c.err_line}}}});
      }
      c.err_line.clear();
    }
  }

  void cancel(Call& c) {
    if (c.cancelled) return;
    c.cancelled = true;
    ::kill(-c.pid, SIGTERM);
  }

  void finish(Call& c) {
    const int status = reap_child(c.pid);
    if (c.cancelled) return;  // a cancelled request gets no response (MCP, "Cancellation")
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const nlohmann::json out = nlohmann::json::parse(c.out_text, nullptr, false);
    // Verdicts and decisions (0-3) are results, whatever they say; anything else is the call failing (isError).
    // Either way the result carries the verb's JSON and its stderr: a failing call that still wrote its JSON (a
    // candidate that does not compile: check exits 65 with the compiler's errors in its failures) keeps it, and
    // its summary says what failed; without JSON the text ends with kwb's stderr.
    // One convention across tools (issue 41): a tool error only when kwb could not do the job. A candidate that does
    // not compile is a verdict on the candidate: check's FAIL with build_failed (exit 65, its JSON printed) is a
    // result like any other rejection.
    const bool result = out.is_object() && (code <= 3 || mcp::is_build_failure_verdict(c.tool, out));
    auto tail = [](const std::string& s) { return s.size() > 4000 ? s.substr(s.size() - 4000) : s; };
    std::string text =
        result ? mcp::summary(c.tool, c.arguments, out, code)
        : out.is_object()
            ? fmt::format("kwb {} failed (exit {}): {}", c.tool, code, mcp::summary(c.tool, c.arguments, out, code))
            : fmt::format("kwb {} failed (exit {}): {}", c.tool, code,
                          c.err_text.empty() ? std::string("no output") : tail(c.err_text));
    reply(c.id, tool_result(text, mcp::structured_result(out, code, c.err_text), !result));
  }

  // A tools/call result: the line to read first, then structuredContent serialized as text too (MCP asks for it,
  // for clients that read only text).
  static nlohmann::json tool_result(const std::string& text, const nlohmann::json& structured, bool is_error) {
    return {{"content", {{{"type", "text"}, {"text", text}}, {{"type", "text"}, {"text", json_text(structured)}}}},
            {"structuredContent", structured},
            {"isError", is_error}};
  }

  std::string m_exe;
  std::map<std::string, Call> m_calls;  // by the request id's JSON text
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw InternalError("mcp: cannot find kwb's own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

Action add_mcp(CLI::App& root) {
  root.add_subcommand("mcp", "Serve kwb's verbs to an agent: Model Context Protocol over stdio (docs/agents.md)");
  return []() {
    // Notices of children and of kwb itself go to stderr; stdout carries protocol messages only.
    Server server(self_exe());
    return server.run();
  };
}

}  // namespace kwb::cli
