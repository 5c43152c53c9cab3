// The tools `kwb mcp` offers (docs/agents.md, "kwb mcp"): each is a kwb verb run as a child `kwb ... --json`, so an
// agent gets exactly what the command line gives, with its exit code, and a call can be cancelled by ending that
// child. This file holds what needs no process: the tools' input schemas, the checking of a call's arguments
// against them, the command line a call becomes, and the text an agent reads first.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::cli::mcp {

// A tools/call whose arguments do not fit the tool's schema: JSON-RPC error -32602, naming the field.
class InvalidParams : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// tools/list's "tools": name, description, annotations, inputSchema and outputSchema for each. The input schema
// states the command line's ranges (cli/options.h), its fixed values (enum) and its defaults, read from the verb's
// own options; the output schema is structured_result's, with the verb's schema file (and those it refers to)
// embedded.
nlohmann::json tool_list();

// How much of a call's stderr its result keeps: the end, whole lines.
inline constexpr size_t k_stderr_kept = 16 * 1024UL;

// A call's structuredContent: {"exit_code": N, "result": the JSON the verb printed (null when it printed none),
// "stderr": the end of what it wrote on stderr}. The verb's JSON is kept unchanged, so it stays valid against its
// own schema file.
nlohmann::json structured_result(const nlohmann::json& output, int exit_code, const std::string& stderr_text);

// The kwb arguments (after the executable) for a call of `tool` with `arguments` (an object), ending in --json.
// InvalidParams for an unknown tool, an unknown or missing argument, or a value of the wrong type.
std::vector<std::string> tool_argv(const std::string& tool, const nlohmann::json& arguments);

// "list_tasks" runs in the server itself: every folder holding a task.toml under `root` (and `root` itself), with
// its name, description, backends and timing workloads, or the error that loading it gave (schema kwb.tasks).
bool runs_in_process(const std::string& tool);
nlohmann::json list_tasks(const nlohmann::json& arguments);

// What an agent reads first about a finished call: the verdict or decision, the reasons, where the evidence is.
// `output` is the JSON the verb printed (null when it printed none), `exit_code` its exit status.
// Whether a call that exited above 3 still judged the candidate: check's FAIL with build_failed (exit 65, its JSON
// printed). Such a call is a result (isError false), as a rejection is.
bool is_build_failure_verdict(const std::string& tool, const nlohmann::json& output);

std::string summary(const std::string& tool, const nlohmann::json& arguments, const nlohmann::json& output,
                    int exit_code);

}  // namespace kwb::cli::mcp
