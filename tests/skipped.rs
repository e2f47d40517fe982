//! The run's last lines: how many tests `SLUICE_TEST_SKIP_SERVICES=1`
//! skipped, and for which servers. Cargo runs this binary last (see
//! Cargo.toml); the skipped tests recorded themselves in the run's ledger
//! (`sluice_testkit::services`).

use std::io::Write as _;

#[test]
fn skipped_tests_in_this_run() {
    let skipped = sluice_testkit::services::take_skipped();
    // Straight to the terminal: cargo shows no captured output of a passing test.
    let _ = writeln!(std::io::stderr(), "\n=== {}\n", sluice_testkit::services::summary(&skipped));
    assert!(
        skipped.is_empty() || !sluice_testkit::services::required(),
        "tests recorded skips without SLUICE_TEST_SKIP_SERVICES=1: {skipped:?}"
    );
}
