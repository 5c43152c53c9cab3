// Everything kwb prints for people passes through a filter that makes control characters and stray bytes visible
// (util/text.h): failure details, file names and build logs come from candidates, and a candidate must not be able
// to rewrite the terminal a reviewer reads. JSON output is unaffected (its strings are already escaped).
#pragma once

namespace kwb::cli {

// Wraps std::cout's and std::cerr's buffers for the life of the process.
void install_safe_terminal_output();

}  // namespace kwb::cli
