// libFuzzer target: the task manifest parser. The input is task.toml, in a folder that also holds the sources a
// manifest may name (impl.cpp, oracle.cpp). load_task may only succeed or throw kwb::Error with exit 65 (or 64):
// never crash, hang, or throw anything else. Seeds: bench/fuzz.sh copies the repository's task.toml files.
#include "task/task.h"
#include "util/error.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("kwb-task-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "cpu" / "controls");
    for (const char* f : {"impl.cpp", "oracle.cpp", "cpu/baseline.cpp", "cpu/fused.cpp", "cpu/controls/zeros.cpp"}) {
      std::ofstream(d / f) << "// source\n";
    }
    return d;
  }();
  std::ofstream(dir / "task.toml", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    (void)kwb::load_task(dir);
  } catch (const kwb::Error& e) {
    if (e.code() != kwb::ExitCode::data_error && e.code() != kwb::ExitCode::usage) std::abort();
  }
  return 0;
}
