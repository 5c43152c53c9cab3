// kwb — the kernel workbench. Decides, with evidence, whether a candidate kernel should replace a baseline.
// Everything but this entry point lives in kwb_cli (cli/run.cpp), compiled once with the command-line parser.
#include "cli/run.h"

int main(int argc, char** argv) { return kwb::cli::run(argc, argv); }
