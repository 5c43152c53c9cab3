// A header in the candidate's own folder: the build sandbox lets the compiler read it, and its hash is part of the
// implementation's identity (tests/integration/build_sandbox_test.cpp edits it and expects a new identity).
#pragma once

#define KWB_WITH_HEADER_OUTPUT_SCALE 1.0f
