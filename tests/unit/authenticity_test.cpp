// Evidence that is authentic, not just consistent (issue 24, class 5): the machine key (util/machine_key.h) and its
// folder's rules, the bundle signature (record/bundle_signature.h) as verify checks it, the ledger's record of a
// validate run (schema 2: the manifest digest), and what verify and keep establish from them
// (ledger/bundle_entry.h). A re-hashed bundle, whose every hash agrees, is self-consistent only.
#include "ledger/bundle_entry.h"
#include "ledger/ledger.h"
#include "record/bundle_signature.h"
#include "record/bundle_writer.h"
#include "record/decision_record.h"
#include "record/verify.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/machine_key.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kwb {
namespace {

namespace fs = std::filesystem;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

class BundleAuth : public ::testing::Test {
protected:
  void SetUp() override {
    if (const char* old = std::getenv("KWB_KEY_DIR")) m_old_key_dir = old;
    ::setenv("KWB_KEY_DIR", keys().c_str(), 1);
  }
  void TearDown() override {
    if (m_old_key_dir) {
      ::setenv("KWB_KEY_DIR", m_old_key_dir->c_str(), 1);
    } else {
      ::unsetenv("KWB_KEY_DIR");
    }
  }
  fs::path keys() const { return m_dir / "config" / "keys"; }

  // A small bundle as validate seals it: plan, decision (binding the plan's digest), a source, the manifest, and
  // signature.json by `key`. Returns the bundle's seal.
  BundleSeal write_bundle(const fs::path& dir, const SigningKey& key, const std::string& source_text) {
    BundleWriter w(dir);
    w.write_text("plan.json", "{\"schema\": \"kwb.plan\", \"schema_version\": 2}\n");
    const std::string plan_digest = sha256_file(dir / "plan.json");
    DecisionRecord decision;
    decision.decision = DecisionKind::keep_candidate;
    decision.exit_code = 0;
    decision.reasons = {"every check, control and workload gate passed"};
    decision.plan_digest = plan_digest;
    decision.inputs = nlohmann::json::object();
    w.write_json("decision.json", to_json(decision));
    w.write_text("sources/candidate.cpp", source_text);
    const std::string manifest = w.write_manifest();
    sign_bundle(dir, key, plan_digest, "KEEP_CANDIDATE");
    return {manifest, plan_digest, "KEEP_CANDIDATE"};
  }

  // The attack of tests/adversarial/bundle_rehash.py, in place: a file swapped and the manifest recomputed.
  static void rehash_with(const fs::path& dir, const std::string& source_text) {
    write_file_atomic(dir / "sources" / "candidate.cpp", source_text);
    write_file_atomic(dir / k_manifest_file, manifest_text(dir));
  }

  static bool mentions(const std::vector<std::string>& lines, const std::string& what) {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(what) != std::string::npos; });
  }

  const test::TempDir m_tmp{"kwb-auth-test"};
  const fs::path m_dir = m_tmp.path();
  std::optional<std::string> m_old_key_dir;
};

TEST_F(BundleAuth, an_ed25519_signature_verifies_only_for_its_message_and_its_key) {
  const SigningKey a = SigningKey::generate(), b = SigningKey::generate();
  const std::string sig = a.sign("manifest 1");
  EXPECT_EQ(a.public_key().size(), 64u);
  EXPECT_EQ(sig.size(), 128u);
  EXPECT_TRUE(verify_signature(a.public_key(), "manifest 1", sig));
  EXPECT_FALSE(verify_signature(a.public_key(), "manifest 2", sig));
  EXPECT_FALSE(verify_signature(b.public_key(), "manifest 1", sig));
  std::string flipped = sig;
  flipped[0] = flipped[0] == '0' ? '1' : '0';
  EXPECT_FALSE(verify_signature(a.public_key(), "manifest 1", flipped));
  EXPECT_FALSE(verify_signature("not hex", "manifest 1", sig));
  EXPECT_FALSE(verify_signature(a.public_key(), "manifest 1", "zz"));
}

TEST_F(BundleAuth, the_machine_key_is_made_once_in_a_folder_only_its_owner_can_open) {
  const SigningKey k = machine_key();
  EXPECT_EQ(mode_of(keys()), 0700u);
  EXPECT_EQ(mode_of(keys() / "machine.key"), 0600u);
  EXPECT_EQ(read_file(keys() / "machine.pub"), k.public_key() + "\n");
  EXPECT_EQ(machine_key().public_key(), k.public_key());  // read back, not made again
  EXPECT_EQ(trusted_keys().own, k.public_key());
  // Reloaded from its PEM, it signs as before.
  EXPECT_TRUE(verify_signature(k.public_key(), "m", SigningKey::load(keys() / "machine.key").sign("m")));
}

TEST_F(BundleAuth, a_key_folder_or_key_file_others_can_read_is_refused_naming_the_fix) {
  machine_key();
  ::chmod(keys().c_str(), 0755);
  try {
    machine_key();
    FAIL() << "a 0755 key folder was used";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::io_error);
    EXPECT_NE(std::string(e.what()).find("chmod 700"), std::string::npos) << e.what();
  }
  // Nothing in an open folder is trusted, not even this machine's own key.
  EXPECT_FALSE(trusted_keys().own.has_value());
  ::chmod(keys().c_str(), 0700);
  ::chmod((keys() / "machine.key").c_str(), 0644);
  try {
    machine_key();
    FAIL() << "a 0644 private key was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  // A symlink in place of the folder is refused too.
  ::chmod((keys() / "machine.key").c_str(), 0600);
  fs::rename(keys(), m_dir / "elsewhere");
  fs::create_directory_symlink(m_dir / "elsewhere", keys());
  EXPECT_THROW(machine_key(), Error);
}

TEST_F(BundleAuth, keys_in_the_trusted_folder_are_trusted_and_malformed_ones_are_named) {
  machine_key();
  const SigningKey other = SigningKey::generate();
  fs::create_directories(keys() / "trusted");
  write_file_atomic(keys() / "trusted" / "node1.pub", other.public_key() + "\n");
  write_file_atomic(keys() / "trusted" / "broken.pub", "not a key\n");
  const TrustedKeys t = trusted_keys();
  EXPECT_TRUE(t.trusts(other.public_key()));
  EXPECT_FALSE(t.trusts(SigningKey::generate().public_key()));
  EXPECT_TRUE(mentions(t.skipped, "broken.pub")) << t.skipped.size();
}

TEST_F(BundleAuth, a_nodes_key_is_enrolled_under_its_name_and_a_bad_key_or_name_is_refused) {
  const SigningKey node = SigningKey::generate();
  const std::filesystem::path file = trust_key(node.public_key() + "\n", "n2");
  EXPECT_EQ(file, keys() / "trusted" / "n2.pub");
  const TrustedKeys t = trusted_keys();
  ASSERT_EQ(t.others.size(), 1u);
  EXPECT_EQ(t.others[0], node.public_key());
  EXPECT_EQ(t.files[0], file);
  EXPECT_TRUE(t.trusts(node.public_key()));
  try {
    (void)trust_key("not a key", "n3");
    ADD_FAILURE() << "a malformed key was enrolled";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a public key: give 64 hex digits"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)trust_key(node.public_key(), "../escape"), DataError);
  EXPECT_THROW((void)trust_key(node.public_key(), ""), DataError);
  EXPECT_FALSE(std::filesystem::exists(keys() / "escape.pub"));
}

TEST_F(BundleAuth, verify_finds_this_machines_signature_and_a_rehashed_bundle_loses_it) {
  const fs::path b = m_dir / "bundle";
  const BundleSeal seal = write_bundle(b, machine_key(), "fast kernel");
  VerifyReport r = verify_bundle(b);
  EXPECT_EQ(r.signature.state, SignatureCheck::State::trusted) << r.signature.detail;
  EXPECT_EQ(r.seal.manifest_sha256, seal.manifest_sha256);
  EXPECT_EQ(r.seal.plan_digest, seal.plan_digest);
  EXPECT_EQ(r.seal.decision, "KEEP_CANDIDATE");
  EXPECT_FALSE(mentions(r.problems, "signature.json")) << "signature.json sits beside the manifest, unlisted";
  EXPECT_EQ(read_file(b / k_manifest_file).find("signature.json"), std::string::npos);

  // The attacker swaps the source and recomputes the manifest: the old signature no longer signs it.
  rehash_with(b, "slow kernel");
  r = verify_bundle(b);
  EXPECT_EQ(r.signature.state, SignatureCheck::State::invalid);
  EXPECT_TRUE(mentions(r.problems, "the bundle was changed after it was signed"));
  // ... so the attacker drops it: nothing then proves who made the bundle.
  fs::remove(b / k_signature_file);
  r = verify_bundle(b);
  EXPECT_EQ(r.signature.state, SignatureCheck::State::absent);
  EXPECT_FALSE(mentions(r.problems, "signature"));
  // ... or signs it with a key of its own: valid, but not one this machine trusts.
  const SigningKey forger = SigningKey::generate();
  write_file_atomic(b / k_signature_file, signature_json(r.seal, forger));
  r = verify_bundle(b);
  EXPECT_EQ(r.signature.state, SignatureCheck::State::untrusted) << r.signature.detail;
  EXPECT_EQ(r.signature.public_key, forger.public_key());
  // Once the user trusts that key (another machine's), the same bundle is authentic by signature.
  fs::create_directories(keys() / "trusted");
  write_file_atomic(keys() / "trusted" / "forger.pub", forger.public_key());
  EXPECT_EQ(verify_bundle(b).signature.state, SignatureCheck::State::trusted);
}

TEST_F(BundleAuth, a_signature_json_that_is_not_one_is_a_problem) {
  const fs::path b = m_dir / "bundle";
  write_bundle(b, machine_key(), "k");
  for (const char* text : {"", "{}", "[1]", "{\"schema\": \"kwb.signature\", \"algorithm\": \"rsa\"}"}) {
    write_file_atomic(b / k_signature_file, text);
    const VerifyReport r = verify_bundle(b);
    EXPECT_EQ(r.signature.state, SignatureCheck::State::invalid) << text;
    EXPECT_TRUE(mentions(r.problems, "signature.json")) << text;
  }
}

class LedgerRecord : public BundleAuth {
protected:
  LedgerRun validate_run(const BundleSeal& seal, const std::string& kind = "validate") {
    LedgerRun r;
    r.kind = kind;
    r.task = "rmsnorm";
    r.task_dir = "/tasks/rmsnorm";
    r.outcome = seal.decision;
    r.plan_digest = seal.plan_digest;
    r.manifest_sha256 = seal.manifest_sha256;
    r.bundle = "/bundles/x";
    r.seal = seal_ledger_row(machine_key(), seal);  // as validate records it
    return r;
  }
};

// A ledger is a file: a bundle's plan names the task whose ledger verify and keep consult, so a forged bundle can come
// with a ledger of its own. Its rows match on every digest, but only a row sealed by a trusted key vouches.
TEST_F(LedgerRecord, a_row_vouches_only_with_a_seal_a_trusted_key_made) {
  Ledger l = Ledger::open(m_dir / "ledger.sqlite");
  const BundleSeal seal{std::string(64, 'a'), std::string(64, 'b'), "KEEP_CANDIDATE"};
  LedgerRun unsealed = validate_run(seal);
  unsealed.seal = "";
  l.record(unsealed);
  EXPECT_FALSE(recorded_run(l, seal));
  LedgerRun forged = validate_run(seal);
  forged.seal = seal_ledger_row(SigningKey::generate(), seal);  // a key this machine does not trust
  l.record(forged);
  EXPECT_FALSE(recorded_run(l, seal));
  LedgerRun other_bundle = validate_run(seal);
  other_bundle.seal = seal_ledger_row(machine_key(), BundleSeal{seal.manifest_sha256, seal.plan_digest, "INVALID"});
  l.record(other_bundle);
  EXPECT_FALSE(recorded_run(l, seal));  // a genuine seal of another decision
  const int64_t id = l.record(validate_run(seal));
  ASSERT_TRUE(recorded_run(l, seal));
  EXPECT_EQ(recorded_run(l, seal)->id, id);
  EXPECT_TRUE(ledger_seal_verifies(recorded_run(l, seal)->seal, seal, trusted_keys()));
  EXPECT_FALSE(ledger_seal_verifies("not a seal", seal, trusted_keys()));
}

TEST_F(LedgerRecord, only_a_validate_row_with_the_same_manifest_plan_and_decision_matches) {
  Ledger l = Ledger::open(m_dir / "ledger.sqlite");
  const BundleSeal seal{std::string(64, 'a'), std::string(64, 'b'), "KEEP_CANDIDATE"};
  EXPECT_FALSE(recorded_run(l, seal));
  l.record(validate_run(seal, "keep"));  // a keep row names the bundle, but is no record of its run
  EXPECT_FALSE(recorded_run(l, seal));
  const int64_t id = l.record(validate_run(seal));
  ASSERT_TRUE(recorded_run(l, seal));
  EXPECT_EQ(recorded_run(l, seal)->id, id);
  EXPECT_EQ(recorded_run(l, seal)->manifest_sha256, seal.manifest_sha256);
  BundleSeal manifest = seal, plan = seal, decision = seal;
  manifest.manifest_sha256 = std::string(64, 'c');
  plan.plan_digest = std::string(64, 'c');
  decision.decision = "KEEP_BASELINE";
  for (const BundleSeal& other : {manifest, plan, decision}) {
    EXPECT_FALSE(recorded_run(l, other)) << other.manifest_sha256 << " " << other.plan_digest << " " << other.decision;
  }
  EXPECT_FALSE(recorded_run(l, BundleSeal{"", seal.plan_digest, seal.decision}));
}

TEST_F(LedgerRecord, a_schema_1_ledger_is_migrated_and_its_old_rows_match_no_bundle) {
  const fs::path file = m_dir / "old.sqlite";
  {
    // Version 1's runs table, with one validate row.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, task TEXT NOT NULL, task_dir TEXT NOT NULL, "
        "backend TEXT NOT NULL, started TEXT NOT NULL, finished TEXT NOT NULL, outcome TEXT NOT NULL, reasons TEXT "
        "NOT NULL, timing_holds TEXT NOT NULL, plan_digest TEXT NOT NULL, bundle TEXT NOT NULL, kwb_version TEXT NOT "
        "NULL, pid INTEGER NOT NULL);"
        "CREATE TABLE arms (run_id INTEGER NOT NULL REFERENCES runs (id), role TEXT NOT NULL, source TEXT NOT NULL, "
        "identity TEXT NOT NULL);"
        "CREATE TABLE workloads (run_id INTEGER NOT NULL REFERENCES runs (id), name TEXT NOT NULL, verdict TEXT NOT "
        "NULL, improvement_pct REAL, ci_low_pct REAL, ci_high_pct REAL);"
        "CREATE TABLE incumbents (task TEXT NOT NULL, backend TEXT NOT NULL, generation INTEGER NOT NULL, identity "
        "TEXT NOT NULL, source TEXT NOT NULL, source_sha256 TEXT NOT NULL, bundle TEXT NOT NULL, kept TEXT NOT NULL, "
        "workloads TEXT NOT NULL, improvement_pct REAL NOT NULL, PRIMARY KEY (task, backend, generation));"
        "INSERT INTO runs VALUES (1, 'validate', 'rmsnorm', '/t', 'cpu', 's', 'f', 'KEEP_CANDIDATE', '[]', '[]', "
        "'bbbb', '/bundles/old', '0.1', 1);"
        "PRAGMA user_version = 1;";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  Ledger l = Ledger::open(file);
  EXPECT_EQ(l.schema_version(), Ledger::k_schema_version);
  const std::vector<LedgerRun> runs = l.runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].manifest_sha256, "");
  EXPECT_FALSE(recorded_run(l, BundleSeal{"", "bbbb", "KEEP_CANDIDATE"}));
}

TEST_F(LedgerRecord, verify_calls_a_bundle_authentic_by_its_ledger_row_or_its_signature_else_self_consistent_only) {
  Ledger l = Ledger::open(m_dir / "ledger.sqlite");
  VerifyReport intact;  // no problems: every hash agrees
  intact.seal = {std::string(64, 'a'), std::string(64, 'b'), "KEEP_CANDIDATE"};
  intact.signature.state = SignatureCheck::State::absent;
  intact.signature.detail = "no signature.json";

  Authenticity a = authenticity(intact, &l);
  EXPECT_FALSE(a.authentic);
  EXPECT_EQ(a.summary.rfind("self-consistent only", 0), 0u) << a.summary;
  EXPECT_NE(a.summary.find("changed after the run, or it was not recorded here"), std::string::npos) << a.summary;
  EXPECT_FALSE(authenticity(intact, nullptr).authentic);

  l.record(validate_run(intact.seal));
  a = authenticity(intact, &l);
  EXPECT_TRUE(a.authentic);
  EXPECT_EQ(a.summary.rfind("authentic: recorded by this machine's ledger", 0), 0u) << a.summary;

  VerifyReport signed_only = intact;
  signed_only.seal.manifest_sha256 = std::string(64, 'e');
  signed_only.signature.state = SignatureCheck::State::trusted;
  signed_only.signature.detail = "signed by this machine's key";
  a = authenticity(signed_only, &l);
  EXPECT_TRUE(a.authentic);
  EXPECT_FALSE(a.recorded.has_value());

  VerifyReport untrusted = signed_only;
  untrusted.signature.state = SignatureCheck::State::untrusted;
  EXPECT_FALSE(authenticity(untrusted, &l).authentic);

  VerifyReport broken = intact;
  broken.problems.push_back("samples.csv: content changed");
  EXPECT_FALSE(authenticity(broken, &l).authentic);  // a recorded bundle that no longer verifies is not authentic
}

}  // namespace
}  // namespace kwb
