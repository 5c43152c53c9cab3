// The depfile parser the builder reads every compile's dependencies with, and the identity's JSON round trip.
#include "builder/depfile.h"
#include "builder/build_sandbox.h"
#include "builder/builder.h"
#include "util/paths.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kwb {
namespace {

using Deps = std::vector<std::string>;

TEST(depfile_test, gcc_rule_with_continuations_lists_prerequisites_not_the_target) {
  const std::string text =
      "/c/out/impl.so: /c/src/k.cpp /usr/include/stdc-predef.h \\\n"
      " /c/src/local.h \\\n"
      " /opt/kwb/include/kwb/kernel.h\n";
  EXPECT_EQ(parse_depfile(text),
            (Deps{"/c/src/k.cpp", "/usr/include/stdc-predef.h", "/c/src/local.h", "/opt/kwb/include/kwb/kernel.h"}));
}

TEST(depfile_test, nvcc_rule_with_a_space_before_the_colon) {
  const std::string text =
      "/c/out/impl.so : /c/src/k.cu \\\n"
      "    /usr/include/stdc-predef.h \\\n"
      "    /c/src/local.h \\\n"
      "\n";
  EXPECT_EQ(parse_depfile(text), (Deps{"/c/src/k.cu", "/usr/include/stdc-predef.h", "/c/src/local.h"}));
}

TEST(depfile_test, escaped_spaces_hashes_and_dollars_are_unescaped) {
  const std::string text = "out.o: /a\\ folder/my\\ header.h /b/x\\#1.h /c/cost$$.h\n";
  EXPECT_EQ(parse_depfile(text), (Deps{"/a folder/my header.h", "/b/x#1.h", "/c/cost$.h"}));
}

TEST(depfile_test, phony_rules_and_repeats_add_nothing_and_crlf_continuations_join) {
  const std::string text =
      "out.o: a.h \\\r\n b.h a.h\r\n"
      "\n"
      "a.h:\n"
      "b.h:\n";
  EXPECT_EQ(parse_depfile(text), (Deps{"a.h", "b.h"}));
}

TEST(depfile_test, several_rules_are_merged_in_order_and_a_missing_final_newline_is_fine) {
  // GNU as --MD: the object depends on the .incbin'ed file and on its input.
  EXPECT_EQ(parse_depfile("/tmp/cc1.o: blob.bin k.cpp /tmp/cc2.s\nx.o: blob.bin other.bin"),
            (Deps{"blob.bin", "k.cpp", "/tmp/cc2.s", "other.bin"}));
  EXPECT_TRUE(parse_depfile("").empty());
  EXPECT_TRUE(parse_depfile("no rule here\n").empty());
}

TEST(depfile_test, path_is_within_compares_whole_components) {
  EXPECT_TRUE(path_is_within("/a/b/c.h", "/a/b"));
  EXPECT_TRUE(path_is_within("/a/b", "/a/b"));
  EXPECT_TRUE(path_is_within("/a/b/c.h", "/a/b/"));
  EXPECT_FALSE(path_is_within("/a/bc/d.h", "/a/b"));
  EXPECT_FALSE(path_is_within("/a", "/a/b"));
  EXPECT_FALSE(path_is_within("/etc/passwd", "/a/b"));
}

TEST(depfile_test, identity_json_round_trips_with_its_dependencies) {
  BuildIdentity id;
  id.source_sha256 = "s";
  id.command = "c++ -O3 <source> -o <artifact>";
  id.compiler = "c++";
  id.compiler_version = "c++ 12";
  id.backend = BackendKind::cpu;
  id.abi_header_sha256 = "a";
  id.layout_variant = 2;
  id.dependencies = {{"<kwb-include>/kwb/kernel.h", "k"}, {"local.h", "l"}};
  id.key = "key";
  id.artifact_sha256 = "art";
  const nlohmann::json j = to_json(id);
  ASSERT_EQ(j["dependencies"].size(), 2u);
  EXPECT_EQ(j["dependencies"][1]["path"], "local.h");
  EXPECT_EQ(j["dependencies"][1]["sha256"], "l");
  const BuildIdentity back = build_identity_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.dependencies, id.dependencies);
}

}  // namespace
}  // namespace kwb
