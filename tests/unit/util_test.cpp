#include "support/temp_dir.h"
#include "task/data.h"
#include "util/backend_kind.h"
#include "util/data_secret.h"
#include "util/elf_code.h"
#include "util/error.h"
#include "util/failure_reason.h"
#include "util/fs.h"
#include "util/parallel.h"
#include "util/paths.h"
#include "util/sealed_json.h"
#include "util/seed.h"
#include "util/sha256.h"
#include "worker/shared_buffer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <elf.h>
#include <cstring>
#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

TEST(util_test, sha256_known_vectors) {
  EXPECT_EQ(kwb::sha256_hex(std::string_view("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(kwb::sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(util_test, a_backend_name_parses_to_its_kind_and_back_and_nothing_else_parses) {
  for (kwb::BackendKind b : kwb::k_backends) EXPECT_EQ(kwb::parse_backend(kwb::to_string(b)), b);
  EXPECT_EQ(kwb::backend_names(), (std::vector<std::string>{"cpu", "opencl", "cuda"}));
  EXPECT_EQ(fmt::format("{}", kwb::BackendKind::opencl), "opencl");
  for (std::string_view bad : {"", "CPU", "cpu ", "metal", "cud"}) EXPECT_FALSE(kwb::parse_backend(bad)) << bad;
  EXPECT_FALSE(kwb::is_device(kwb::BackendKind::cpu));
  EXPECT_TRUE(kwb::is_device(kwb::BackendKind::cuda));
  // JSON holds names: nlohmann's default would write an enum as its integer and read any integer back.
  EXPECT_EQ(nlohmann::json(kwb::BackendKind::cuda), "cuda");
  EXPECT_EQ(nlohmann::json({{"reason", kwb::FailureReason::stale_output}}).dump(), R"({"reason":"stale_output"})");
  EXPECT_EQ(nlohmann::json("timeout").get<kwb::FailureReason>(), kwb::FailureReason::timeout);
  EXPECT_THROW(nlohmann::json("metal").get<kwb::BackendKind>(), kwb::DataError);
  EXPECT_THROW(nlohmann::json("slow").get<kwb::FailureReason>(), kwb::DataError);
  try {
    kwb::parse_backend_field("metal", "plan.json: backend");
    FAIL() << "an unknown name in a file kwb reads back must be refused";
  } catch (const kwb::DataError& e) {
    EXPECT_EQ(std::string(e.what()), "plan.json: backend: unknown backend 'metal' (kwb knows cpu, opencl and cuda)");
  }
}

TEST(util_test, every_failure_reason_has_its_own_name_and_parses_back) {
  std::set<std::string> names;
  for (size_t i = 0; i < std::size(kwb::k_failure_reason_names); ++i) {
    const auto r = static_cast<kwb::FailureReason>(i);
    EXPECT_TRUE(names.insert(std::string(kwb::to_string(r))).second) << kwb::to_string(r);
    EXPECT_EQ(kwb::parse_failure_reason(kwb::to_string(r)), r);
  }
  EXPECT_EQ(kwb::to_string(kwb::FailureReason::work_outside_timer), "work_outside_timer");
  EXPECT_EQ(kwb::to_string(std::optional<kwb::FailureReason>()), "");
  EXPECT_FALSE(kwb::parse_failure_reason("numeric mismatch"));
  EXPECT_FALSE(kwb::parse_failure_reason(""));
}

TEST(util_test, atomic_write_replaces_whole_file_and_leaves_no_temporary) {
  const kwb::test::TempDir dir("kwb-util");
  kwb::write_file_atomic(dir / "f.json", "first");
  kwb::write_file_atomic(dir / "f.json", "second");
  EXPECT_EQ(kwb::read_file(dir / "f.json"), "second");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

// A relative KWB_CACHE_DIR is made absolute: the sandboxed compiler runs in another folder, and a relative cache path
// made every build fail there.
TEST(util_test, the_cache_folder_is_absolute_even_when_named_relatively) {
  const char* old = std::getenv("KWB_CACHE_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("KWB_CACHE_DIR", "relative/cache", 1);
  EXPECT_TRUE(kwb::cache_dir().is_absolute());
  EXPECT_EQ(kwb::cache_dir(), std::filesystem::current_path() / "relative" / "cache");
  if (old != nullptr) {
    ::setenv("KWB_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("KWB_CACHE_DIR");
  }
}

TEST(data_test, same_seed_same_bytes_different_seed_different_bytes) {
  kwb::Distribution d;  // normal(0, 1)
  std::vector<unsigned char> a(4096), b(4096), c(4096);
  kwb::fill_tensor(d, kwb::DType::f32, a, 42);
  kwb::fill_tensor(d, kwb::DType::f32, b, 42);
  kwb::fill_tensor(d, kwb::DType::f32, c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(data_test, normal_has_requested_moments) {
  kwb::Distribution d;
  d.scale = 4.0;
  d.mean = 1.0;
  std::vector<unsigned char> buf(8 * 200000);
  kwb::fill_tensor(d, kwb::DType::f64, buf, 7);
  const double* v = reinterpret_cast<const double*>(buf.data());
  double sum = 0, sq = 0;
  for (size_t i = 0; i < 200000; ++i) {
    sum += v[i];
    sq += v[i] * v[i];
  }
  double mean = sum / 200000, var = sq / 200000 - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 4.0, 0.05);
}

TEST(data_test, uniform_stays_in_range) {
  kwb::Distribution d;
  d.kind = kwb::DistributionKind::uniform;
  d.low = 0.5;
  d.high = 1.5;
  std::vector<unsigned char> buf(4 * 10000);
  kwb::fill_tensor(d, kwb::DType::f32, buf, 3);
  const float* v = reinterpret_cast<const float*>(buf.data());
  for (size_t i = 0; i < 10000; ++i) {
    ASSERT_GE(v[i], 0.5f);
    ASSERT_LE(v[i], 1.5f);
  }
}

TEST(data_test, input_sets_of_a_case_never_share_a_seed) {
  kwb::Case c;
  c.seed = 5;
  EXPECT_NE(kwb::input_seed(c, 0, 0, 0), kwb::input_seed(c, 0, 1, 0));
  EXPECT_NE(kwb::input_seed(c, 0, 0, 0), kwb::input_seed(c, 1, 0, 0));
  EXPECT_NE(kwb::input_seed(c, 0, 0, 0), kwb::input_seed(c, 0, 0, 1));
}

// A run's data (nonce != 0) is seeded through a keyed hash: the public mixing formula of the published data (nonce 0)
// does not give it, so a candidate that carries kwb's generator and guesses the nonce's formula still misses, and a
// tensor's seed recovered from its values leads to no other tensor's.
TEST(data_test, a_runs_input_seeds_are_a_keyed_hash_not_the_published_formula) {
  kwb::Case c;
  c.seed = 501;
  const uint64_t nonce = 0x7153D47Bull;  // what compare's default --seed 1 gave before the data secret
  const uint64_t published_formula = kwb::mix_seed(kwb::mix_seed(kwb::mix_seed(c.seed, 1), 1001), nonce);
  EXPECT_NE(kwb::input_seed(c, 0, 1000, nonce), published_formula);
  EXPECT_EQ(kwb::input_seed(c, 0, 1000, nonce), kwb::sha256_u64("kwb.input_seed.v1", {nonce, 501, 0, 1000}));
  // The published data keeps its public formula: anyone regenerates what `kwb check` ran.
  EXPECT_EQ(kwb::input_seed(c, 0, 1000, 0), kwb::mix_seed(kwb::mix_seed(kwb::mix_seed(c.seed, 1), 1001), 0));
  EXPECT_NE(kwb::input_seed(c, 0, 1000, nonce), kwb::input_seed(c, 0, 1001, nonce));
  EXPECT_NE(kwb::input_seed(c, 0, 1000, nonce), kwb::input_seed(c, 1, 1000, nonce));
}

TEST(data_secret_test, each_draw_is_new_and_its_hex_round_trips) {
  const kwb::DataSecret a = kwb::DataSecret::draw();
  const kwb::DataSecret b = kwb::DataSecret::draw();
  EXPECT_NE(a.hex(), b.hex());
  ASSERT_EQ(a.hex().size(), 64u);
  const std::optional<kwb::DataSecret> back = kwb::DataSecret::from_hex(a.hex());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->hex(), a.hex());
  EXPECT_EQ(back->commitment(), a.commitment());
  EXPECT_EQ(back->nonce("final"), a.nonce("final"));
  EXPECT_FALSE(kwb::DataSecret::from_hex(a.hex().substr(1)).has_value());
  EXPECT_FALSE(kwb::DataSecret::from_hex(std::string(64, 'G')).has_value());
  EXPECT_FALSE(kwb::DataSecret::from_hex(std::string(64, 'A')).has_value());  // upper case is not what hex() writes
}

// The commitment and the nonces, against an independent computation (Python's hashlib gave these for the secret
// 00 01 02 ... 1f), so that a reviewer can recompute them from a bundle without kwb.
TEST(data_secret_test, commitment_and_nonces_are_sha256_of_tagged_secret) {
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += fmt::format("{:02x}", i);
  const std::optional<kwb::DataSecret> s = kwb::DataSecret::from_hex(hex);
  ASSERT_TRUE(s.has_value());
  std::string tagged = std::string("kwb.data_secret.commitment.v1") + '\0';
  for (int i = 0; i < 32; ++i) tagged += static_cast<char>(i);
  EXPECT_EQ(s->commitment(), kwb::sha256_hex(std::string_view(tagged)));
  EXPECT_EQ(s->commitment(), "016ebe502b57c17135296416e8be072fdb69e3973823c9847b3f2a1d672b6da5");
  EXPECT_EQ(s->nonce("final"), 16851219151389727671ull);
  EXPECT_EQ(s->nonce("timing"), 7716416612171688753ull);
  EXPECT_NE(s->nonce("final"), s->nonce("timing"));
  EXPECT_NE(s->nonce("profile"), s->nonce("timing"));
}

TEST(shared_buffer_test, canaries_detect_a_write_just_outside_the_data) {
  kwb::SharedBuffer b("t", 100);
  b.write_canaries(9);
  EXPECT_FALSE(b.damaged_canary(9));
  auto d = b.data();
  d.data()[d.size()] ^= 1;  // one byte after the data, still inside the memfd
  auto damaged = b.damaged_canary(9);
  ASSERT_TRUE(damaged);
  EXPECT_EQ(*damaged, b.layout().data_offset + 100);
}

// The poison fills every element at its width, a one-byte dtype's (i8, u8, bool) too: an 8-byte word repeated would
// leave seven of every eight bytes 0 (a valid bool, i8 or u8 value) and an unwritten element could pass as one.
TEST(shared_buffer_test, a_pattern_fills_every_element_at_its_width) {
  // 104 bytes: past the first 64-byte line; 98760: many doublings and a last partial copy.
  for (size_t bytes : {8u * 13u, 8u * 12345u}) {
    for (size_t width : {1u, 2u, 4u, 8u}) {
      kwb::SharedBuffer b("t", bytes);
      b.fill_pattern(0x0123456789ABCDEFull, width);
      const auto d = std::as_const(b).data();
      for (size_t i = 0; i < d.size(); ++i) {
        ASSERT_EQ(d[i], static_cast<unsigned char>(0x0123456789ABCDEFull >> (8 * (i % width))))
            << bytes << " " << width << " " << i;
      }
    }
  }
  kwb::SharedBuffer odd("t", 8);
  EXPECT_THROW(odd.fill_pattern(1, 3), std::invalid_argument);
}

// Every canary byte is checked, before the data and after it, wherever in its 8-byte hash word it lies.
TEST(shared_buffer_test, canaries_detect_a_write_to_any_byte_around_the_data) {
  kwb::SharedBuffer b("t", 100, 13);
  const kwb::BufferLayout l = b.layout();
  ASSERT_GT(l.data_offset, 16u);
  for (size_t at : {size_t{0}, size_t{5}, l.data_offset - 1, l.data_offset + 100, l.data_offset + 107, l.total - 1}) {
    b.write_canaries(77);
    ASSERT_FALSE(b.damaged_canary(77));
    (b.data().data() - l.data_offset)[at] ^= 0x40;  // the memfd's byte `at`
    const auto damaged = b.damaged_canary(77);
    ASSERT_TRUE(damaged) << at;
    EXPECT_EQ(*damaged, at);
  }
  // Another seed's canaries differ somewhere: they cannot be predicted without it.
  b.write_canaries(77);
  EXPECT_TRUE(b.damaged_canary(78));
}

TEST(shared_buffer_test, sealed_buffer_refuses_writes_even_through_mprotect) {
  kwb::SharedBuffer b("t", 64);
  b.data()[0] = 7;
  b.seal();
  EXPECT_THROW(b.data(), kwb::InternalError);
  EXPECT_EQ(std::as_const(b).data()[0], 7);
  // Another mapping of the same memfd cannot be writable: the seal holds for every process.
  void* p = ::mmap(nullptr, b.layout().total, PROT_READ | PROT_WRITE, MAP_SHARED, b.fd(), 0);
  EXPECT_EQ(p, MAP_FAILED);
  void* r = ::mmap(nullptr, b.layout().total, PROT_READ, MAP_SHARED, b.fd(), 0);
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_NE(::mprotect(r, b.layout().total, PROT_READ | PROT_WRITE), 0);
  ::munmap(r, b.layout().total);
}

namespace {

// A minimal 64-bit shared object image: an ELF header, two program headers (a PT_LOAD of the whole image and a
// PT_NOTE inside it), then `code` and a 4-byte note payload.
std::string tiny_elf(const std::string& code, const std::string& note, uint64_t shoff) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_type = ET_DYN;
  eh.e_phoff = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 2;
  eh.e_shoff = shoff;
  const uint64_t body = sizeof eh + 2 * sizeof(Elf64_Phdr);
  Elf64_Phdr load{}, nt{};
  load.p_type = PT_LOAD;
  load.p_flags = PF_R | PF_X;
  load.p_filesz = load.p_memsz = body + code.size() + note.size();
  nt.p_type = PT_NOTE;
  nt.p_offset = body + code.size();
  nt.p_filesz = note.size();
  std::string out(reinterpret_cast<const char*>(&eh), sizeof eh);
  out.append(reinterpret_cast<const char*>(&load), sizeof load);
  out.append(reinterpret_cast<const char*>(&nt), sizeof nt);
  return out + code + note;
}

}  // namespace

// The mapped code, apart from the build-id note and the section table's place: equal for the same code, different
// for other code, and no answer (with why) for what is not a readable ELF image, however it is cut.
TEST(elf_code_test, same_mapped_code_hashes_alike_and_a_malformed_image_has_no_hash) {
  std::string why;
  const auto a = kwb::elf_code_sha256(tiny_elf("\x90\x90\xc3", "ID01", 4096), why);
  const auto b = kwb::elf_code_sha256(tiny_elf("\x90\x90\xc3", "ID02", 8192), why);
  const auto c = kwb::elf_code_sha256(tiny_elf("\x90\xcc\xc3", "ID01", 4096), why);
  ASSERT_TRUE(a && b && c) << why;
  EXPECT_EQ(*a, *b) << "a build-id or a section table elsewhere is not code";
  EXPECT_NE(*a, *c);
  const std::string image = tiny_elf("\x90\x90\xc3", "ID01", 4096);
  for (size_t cut : {size_t{0}, size_t{10}, sizeof(Elf64_Ehdr) + 3, image.size() - 1}) {
    EXPECT_FALSE(kwb::elf_code_sha256(image.substr(0, cut), why).has_value()) << cut;
    EXPECT_FALSE(why.empty());
  }
  EXPECT_FALSE(kwb::elf_code_sha256("not an elf file at all, but long enough to hold a header's worth of bytes", why));
}

// A record kwb believes later (campaign.json, trajectory.json) carries a seal over its kind and its other fields: it
// verifies as written and after a round trip through text, and not after any edit, under another kind, without a
// seal, or when a key this machine does not trust made it.
TEST(sealed_json_test, a_record_verifies_as_written_and_not_after_an_edit_or_under_an_untrusted_key) {
  const kwb::SigningKey key = kwb::SigningKey::generate();
  kwb::TrustedKeys trusted;
  trusted.own = key.public_key();
  const nlohmann::json doc = {{"schema", "kwb.campaign"}, {"jobs", {{{"decision", "KEEP_BASELINE"}, {"x", 0.1}}}}};
  const nlohmann::json sealed = kwb::sealed_json(doc, "kwb.campaign", key);
  EXPECT_EQ(kwb::sealed_json_problem(sealed, "kwb.campaign", trusted), "");
  EXPECT_EQ(kwb::sealed_json_problem(nlohmann::json::parse(sealed.dump(2)), "kwb.campaign", trusted), "");
  nlohmann::json edited = sealed;
  edited["jobs"][0]["decision"] = "KEEP_CANDIDATE";
  EXPECT_NE(kwb::sealed_json_problem(edited, "kwb.campaign", trusted).find("changed after kwb wrote it"),
            std::string::npos);
  EXPECT_NE(kwb::sealed_json_problem(sealed, "kwb.trajectory", trusted), "");
  EXPECT_EQ(kwb::sealed_json_problem(doc, "kwb.campaign", trusted), "it has no seal");
  const kwb::SigningKey other = kwb::SigningKey::generate();
  EXPECT_NE(kwb::sealed_json_problem(kwb::sealed_json(edited, "kwb.campaign", other), "kwb.campaign", trusted)
                .find("does not trust"),
            std::string::npos);
}

// The loop timing pools are made with: every index once, whatever the threads; after failures, the earliest
// failing index's exception, as a loop in order would throw it, and no index past a failure is started late.
TEST(util_test, for_each_index_visits_every_index_once_and_rethrows_the_earliest_failure) {
  for (size_t threads : {size_t{1}, size_t{2}, size_t{5}}) {
    std::vector<int> seen(100, 0);
    kwb::for_each_index(seen.size(), threads, [&](size_t t, size_t i) {
      ++seen[i];
      ASSERT_LT(t, threads);
    });
    EXPECT_EQ(seen, std::vector<int>(100, 1)) << threads << " threads";
    try {
      kwb::for_each_index(50, threads, [&](size_t, size_t i) {
        if (i == 7 || i == 30) throw std::runtime_error(std::to_string(i));
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "7") << threads << " threads";
    }
  }
}
