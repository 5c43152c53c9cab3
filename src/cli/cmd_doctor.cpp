// kwb doctor [--backend B] [--task DIR]... [--file F]... [--storage DIR] [--no-profile] [--json]: whether this machine
// can run kwb validate, checked piece by piece before any work (docs/campaigns.md, "What a node needs"). A campaign's
// Slurm job runs it first on its node: a node that lacks a piece is the node's fault, reported with the piece and the
// fix, never the candidate's. Exit 0 when every required piece is there, 69 (unavailable) when one is not.
#include "builder/build_sandbox.h"
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "profile/valgrind.h"
#include "task/task.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/json_text.h"
#include "util/machine_key.h"
#include "util/paths.h"
#include "util/subprocess.h"
#include "worker/worker_process.h"

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <iostream>

namespace kwb::cli {

namespace {

namespace fs = std::filesystem;

struct Finding {
  std::string piece;
  bool ok = false;
  bool required = true;  // false: a warning (the job can run without it)
  std::string detail;    // what was found, or what is missing
  std::string fix;       // "" when ok
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// `argv --version`'s first line, or "" when it does not run.
std::string version_of(const std::vector<std::string>& argv) {
  try {
    const CommandResult r = run_command(argv, std::chrono::seconds(20), StderrMode::merged);
    if (r.exit_code != 0) return "";
    // nvcc prints its release on the last line; compilers on the first.
    const std::string& out = r.output;
    const size_t release = out.find("release ");
    return release != std::string::npos ? first_line(out.substr(release)) : first_line(out);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception&) {
    return "";
  }
}

Finding check_kwb() {
  Finding f{"kwb", false, true, "", ""};
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path worker = worker_executable();
  if (::access(worker.c_str(), X_OK) != 0) {
    f.detail = fmt::format("{} runs, but its worker {} is missing or not executable", self.string(), worker.string());
    f.fix = "install kwb whole on this node (the same path as on the submit host), with its worker beside it";
    return f;
  }
  f.ok = true;
  f.detail = fmt::format("{} (worker {})", self.string(), worker.string());
  return f;
}

std::vector<Finding> check_sandbox() {
  Finding bwrap{"bubblewrap", false, true, "", ""};
  const std::string path = find_bubblewrap();
  if (path.empty()) {
    bwrap.detail = "bwrap is not installed (not on PATH, not /usr/bin/bwrap, KWB_BWRAP unset or not executable)";
    bwrap.fix = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; RHEL: dnf install bubblewrap)";
    return {bwrap};
  }
  bwrap.ok = true;
  bwrap.detail = path;
  Finding ns{"user namespaces", false, true, "", ""};
  try {
    require_build_sandbox();
    ns.ok = true;
    ns.detail = "bwrap created its namespaces (a sandbox ran /usr/bin/true)";
  } catch (const Error& e) {
    ns.detail = e.what();
    ns.fix =
        "allow unprivileged user namespaces on the node (sysctl user.max_user_namespaces > 0, "
        "kernel.unprivileged_userns_clone=1), or run the jobs in a container that permits them (docs/threat-model.md, "
        "\"Inside a container\")";
  }
  return {bwrap, ns};
}

Finding check_compiler(BackendKind backend) {
  Finding f{"compiler", false, true, "", ""};
  const std::string compiler = implementation_compiler(backend);
  const std::string version = version_of({compiler, "--version"});
  if (version.empty()) {
    f.detail = fmt::format("`{} --version` does not run", compiler);
    f.fix = backend == BackendKind::cuda ? "install the CUDA toolkit, or set KWB_NVCC to its nvcc"
                                         : "install a C++20 compiler (Debian: apt-get install g++), or set KWB_CXX";
    return f;
  }
  f.ok = true;
  f.detail = fmt::format("{}: {}", compiler, version);
  return f;
}

Finding check_backend(BackendKind backend) {
  Finding f{fmt::format("backend {}", backend), false, true, "", ""};
  if (!is_device(backend)) {
    f.ok = true;
    f.detail = "the CPU";
    return f;
  }
  try {
    f.detail = probe_backend(worker_executable(), backend);
    f.ok = true;
  } catch (const Error& e) {
    f.detail = e.what();
    f.fix = backend == BackendKind::cuda
                ? "run on a node with an NVIDIA GPU and its driver (executor.gres, constraint)"
                : "install an OpenCL ICD for the node's device (Debian: pocl-opencl-icd for CPUs)";
  }
  return f;
}

Finding check_valgrind(bool profile) {
  Finding f{"valgrind", false, profile, "", ""};
  const ValgrindInstall v = find_valgrind();
  f.ok = v.found;
  f.detail = v.found ? fmt::format("{} ({})", v.path.string(), v.version) : v.reason;
  if (!v.found) {
    f.fix = profile ? "install valgrind (the profile stage runs callgrind), or give validate --no-profile"
                    : "none needed: the jobs run with --no-profile";
  }
  return f;
}

Finding check_key() {
  Finding f{"machine key", false, true, "", ""};
  try {
    const SigningKey key = machine_key();
    f.ok = true;
    f.detail = fmt::format("{} (public key {}: enrol it where the campaign runs with `kwb campaign trust`)",
                           key_dir().string(), key.public_key());
  } catch (const Error& e) {
    f.detail = e.what();
    f.fix = "give the jobs a key folder of their own on node-local storage (KWB_KEY_DIR), mode 0700";
  }
  return f;
}

Finding check_task(const fs::path& dir) {
  Finding f{"task " + dir.string(), false, true, "", ""};
  try {
    const Task t = load_task(dir);
    f.ok = true;
    f.detail = fmt::format("{} (identity {})", t.name, t.identity.substr(0, 12));
  } catch (const Error& e) {
    f.detail = first_line(e.what());
    f.fix = "the same paths on every node: mount the task folder where the submit host has it";
  }
  return f;
}

Finding check_file(const fs::path& file) {
  Finding f{"file " + file.string(), false, true, "", ""};
  if (::access(file.c_str(), R_OK) == 0 && fs::is_regular_file(file)) {
    f.ok = true;
    f.detail = "readable";
  } else {
    f.detail = "missing or not readable here";
    f.fix = "the same paths on every node: put the campaign's sources on a file system every node mounts";
  }
  return f;
}

Finding check_storage(const fs::path& dir) {
  Finding f{"storage " + dir.string(), false, true, "", ""};
  const fs::path probe = dir / fmt::format(".kwb-doctor-{}", ::getpid());
  try {
    write_file_atomic(probe, "kwb doctor\n");
    fs::remove(probe);
    f.ok = true;
    f.detail = "writable";
  } catch (const std::exception& e) {
    f.detail = first_line(e.what());
    f.fix = "the campaign's storage on a file system every node mounts read-write at the same path";
  }
  return f;
}

int doctor(BackendKind backend, const std::vector<std::string>& tasks, const std::vector<std::string>& files,
           const std::string& storage, bool no_profile, bool json) {
  std::vector<Finding> found = {check_kwb()};
  for (Finding& f : check_sandbox()) found.push_back(std::move(f));
  found.push_back(check_compiler(backend));
  found.push_back(check_backend(backend));
  found.push_back(check_valgrind(!no_profile));
  found.push_back(check_key());
  for (const std::string& t : tasks) found.push_back(check_task(fs::absolute(t)));
  for (const std::string& f : files) found.push_back(check_file(fs::absolute(f)));
  if (!storage.empty()) found.push_back(check_storage(fs::absolute(storage)));
  bool fit = true;
  std::vector<std::string> missing;
  for (const Finding& f : found) {
    if (!f.ok && f.required) {
      fit = false;
      missing.push_back(f.piece);
    }
  }
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  if (json) {
    nlohmann::json checks = nlohmann::json::array();
    for (const Finding& f : found) {
      checks.push_back(
          {{"piece", f.piece}, {"ok", f.ok}, {"required", f.required}, {"detail", f.detail}, {"fix", f.fix}});
    }
    std::cout << json_text({{"schema", "kwb.doctor"},
                            {"schema_version", 1},
                            {"host", host},
                            {"backend", std::string(to_string(backend))},
                            {"fit", fit},
                            {"missing", missing},
                            {"checks", checks}},
                           2)
              << "\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    rows.reserve(found.size());
    for (const Finding& f : found) {
      rows.push_back({f.piece,
                      f.ok         ? "ok"
                      : f.required ? "MISSING"
                                   : "warning",
                      f.detail, f.fix.empty() ? "-" : f.fix});
    }
    std::cout << fmt::format("kwb doctor on {} (backend {})\n", host, backend)
              << format_table({"piece", "state", "found", "fix"}, rows)
              << (fit ? "this machine can run kwb validate\n"
                      : fmt::format("this machine cannot run kwb validate: missing {}\n", fmt::join(missing, ", ")));
  }
  return fit ? 0 : static_cast<int>(ExitCode::unavailable);
}

}  // namespace

Action add_doctor(CLI::App& root) {
  struct Args {
    std::string backend = "cpu";
    std::vector<std::string> tasks;
    std::vector<std::string> files;
    std::string storage;
    bool no_profile = false;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = root.add_subcommand(
      "doctor",
      "Check that this machine has what kwb validate needs: sandbox, compiler, backend, valgrind, key, paths");
  app->add_option("--backend", a->backend, "The backend the jobs use")->check(CLI::IsMember({"cpu", "opencl", "cuda"}));
  app->add_option("--task", a->tasks, "A task folder the jobs read (repeat)");
  app->add_option("--file", a->files, "A file the jobs read: a candidate, a baseline (repeat)");
  app->add_option("--storage", a->storage, "A folder the jobs write (a campaign's storage)");
  app->add_flag("--no-profile", a->no_profile, "The jobs run without the profile stage: valgrind is not required");
  app->add_flag("--json", a->json, "Print the findings as JSON (schema kwb.doctor)");
  return [a]() {
    return doctor(parse_backend_field(a->backend, "--backend"), a->tasks, a->files, a->storage, a->no_profile, a->json);
  };
}

}  // namespace kwb::cli
