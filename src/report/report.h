// Reports are views of the bundle's JSON (and raw samples): report.md to paste into a pull request, report.html
// (self-contained, inline SVG plots) to look at. Rendering reads only the bundle.
#pragma once

#include "record/bundle_reader.h"

#include <filesystem>
#include <string>

namespace kwb {

std::string render_markdown(const BundleData& b);
std::string render_html(const BundleData& b);

// Reads the bundle in `dir` and (re)writes report.md and report.html there, atomically.
void write_reports(const std::filesystem::path& dir);

}  // namespace kwb
