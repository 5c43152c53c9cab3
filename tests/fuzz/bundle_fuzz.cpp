// libFuzzer target: what `kwb verify` and `kwb report` do with a bundle someone else wrote. The input is a bundle
// flattened into one byte string: segments "\n@@ <path>\n<content>", each written into a fresh folder, then
// verify_bundle and write_reports run on it. Neither may crash, hang or throw anything but kwb::Error (report's
// refusal, exit 3). Seeds: bench/fuzz.sh flattens a real bundle.
#include "record/verify.h"
#include "report/report.h"
#include "util/error.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace fs = std::filesystem;

namespace {

// The names a bundle has; a segment naming anything else is mapped onto one of these (the fuzzer must not write
// outside its folder, and these are what the reader looks at).
constexpr std::string_view k_names[] = {"plan.json",
                                        "decision.json",
                                        "stages.json",
                                        "environment.json",
                                        "controls.json",
                                        "final.json",
                                        "samples.csv",
                                        "MANIFEST.sha256",
                                        "comparisons/aa.json",
                                        "comparisons/ab.json",
                                        "checks/baseline.json",
                                        "checks/candidate.json",
                                        "checks/baseline_copy.json",
                                        "checks/candidate_final.json",
                                        "checks/control_zeros.json",
                                        "profile/baseline.json",
                                        "artifacts/a.so"};

std::string_view pick_name(std::string_view wanted) {
  for (std::string_view n : k_names) {
    if (n == wanted) return n;
  }
  size_t h = 0;
  for (char c : wanted) h = h * 131 + static_cast<unsigned char>(c);
  return k_names[h % std::size(k_names)];
}

const fs::path& folder() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("kwb-bundle-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(d);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = folder();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view k_mark = "\n@@ ";
  size_t pos = in.find(k_mark);
  while (pos != std::string_view::npos) {
    const size_t name_start = pos + k_mark.size();
    const size_t name_end = in.find('\n', name_start);
    if (name_end == std::string_view::npos) break;
    const size_t next = in.find(k_mark, name_end);
    const std::string_view content =
        in.substr(name_end + 1, next == std::string_view::npos ? std::string_view::npos : next - name_end - 1);
    const fs::path file = dir / std::string(pick_name(in.substr(name_start, name_end - name_start)));
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(content.data(), static_cast<std::streamsize>(content.size()));
    pos = next;
  }
  (void)kwb::verify_bundle(dir);
  try {
    kwb::write_reports(dir);
  } catch (const kwb::Error&) {
    // A refusal with an exit code is the intended outcome for a malformed bundle.
  }
  return 0;
}
