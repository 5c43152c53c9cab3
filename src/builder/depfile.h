// Make-syntax dependency files, as written by `cc -MD -MF`, `nvcc -MD -MF` and GNU `as --MD`: the files a compile
// read, which the builder hashes into an implementation's identity (builder.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// The prerequisites of every rule in `text`, in order of first appearance, each once; targets are dropped.
// Understands backslash-newline continuations, "\ " (escaped space), "\#", "$$", and "target : deps" with or
// without a space before the colon (nvcc writes one). Phony rules (-MP) contribute nothing new.
std::vector<std::string> parse_depfile(std::string_view text);

}  // namespace kwb
