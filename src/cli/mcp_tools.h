// The tools `kwb mcp` offers (docs/agents.md, "kwb mcp"): each is a kwb verb run as a child `kwb ... --json`, so an
// agent gets exactly what the command line gives, with its exit code, and a call can be cancelled by ending that
// child. This file holds what needs no process: the tools' input schemas, the checking of a call's arguments
// against them, the command line a call becomes, and the text an agent reads first.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::cli::mcp {

// A tools/call whose arguments do not fit the tool's schema: JSON-RPC error -32602, naming the field.
class InvalidParams : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// tools/list's "tools": name, description, inputSchema for each.
nlohmann::json tool_list();

// The kwb arguments (after the executable) for a call of `tool` with `arguments` (an object), ending in --json.
// InvalidParams for an unknown tool, an unknown or missing argument, or a value of the wrong type.
std::vector<std::string> tool_argv(const std::string& tool, const nlohmann::json& arguments);

// "list_tasks" runs in the server itself: every folder holding a task.toml under `root` (and `root` itself), with
// its name, description, backends and timing workloads, or the error that loading it gave.
bool runs_in_process(const std::string& tool);
nlohmann::json list_tasks(const nlohmann::json& arguments);

// What an agent reads first about a finished call: the verdict or decision, the reasons, where the evidence is.
// `output` is the JSON the verb printed (null when it printed none), `exit_code` its exit status.
std::string summary(const std::string& tool, const nlohmann::json& arguments, const nlohmann::json& output,
                    int exit_code);

}  // namespace kwb::cli::mcp
