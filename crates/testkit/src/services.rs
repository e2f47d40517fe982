//! The servers and tools the tests use (PostgreSQL, MariaDB, `moto_server`,
//! Chromium…): a test whose server is down fails naming it and how to start
//! it, unless `SLUICE_TEST_SKIP_SERVICES=1` opts out. Then the test says it
//! is skipped on the terminal and in a ledger the run shares, and the
//! `sluice-tests` package's last test binary (`skipped`) prints the total in
//! the run's last lines.
//!
//! The ledger is one file per `cargo test` process (the parent of every test
//! binary it runs) under `target/<profile>/skipped-tests/`.

use std::fmt::Display;
use std::io::Write as _;
use std::path::PathBuf;

/// Whether the servers the tests use must be up: always, unless
/// `SLUICE_TEST_SKIP_SERVICES=1` says to skip the tests that need them.
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
pub fn required() -> bool {
    !std::env::var("SLUICE_TEST_SKIP_SERVICES").is_ok_and(|v| v == "1")
}

/// The test on this thread needs `what`, which is unavailable (`why`).
/// Fails it naming `what` and `start` (how to get it running), or, with the
/// opt-out, records the skip and returns: the caller then returns too.
#[track_caller]
pub fn unavailable(what: &str, why: impl Display, start: &str) {
    assert!(
        !required(),
        "{what} is unavailable ({why}): {start} (.ci/run does), or set SLUICE_TEST_SKIP_SERVICES=1 to skip the tests that need it"
    );
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    // Straight to the terminal: cargo shows no captured output of a passing test.
    let _ = writeln!(std::io::stderr(), "\n!!! SKIPPED {test}: {what} is unavailable ({why})\n");
    if let Some(file) = ledger() {
        let _ = std::fs::create_dir_all(file.parent().unwrap_or(&file));
        let line = format!("{}\t{}\n", one_line(what), one_line(&test));
        // One short append per skip: atomic enough across the test processes.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// The skips of this `cargo test` run so far, `(what, test)`, and forgets
/// them (and ledgers of runs older than a day).
pub fn take_skipped() -> Vec<(String, String)> {
    let Some(file) = ledger() else { return Vec::new() };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    if let Some(Ok(entries)) = file.parent().map(std::fs::read_dir) {
        let day = std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    text.lines().filter_map(|l| l.split_once('\t')).map(|(w, t)| (w.to_string(), t.to_string())).collect()
}

/// A summary of `skipped` for the run's last lines.
pub fn summary(skipped: &[(String, String)]) -> String {
    if skipped.is_empty() {
        return if required() {
            "every test ran: no server the tests use was skipped".into()
        } else {
            "SLUICE_TEST_SKIP_SERVICES=1, yet no test was skipped: every server the tests use was up".into()
        };
    }
    let mut by_what = std::collections::BTreeMap::<&str, usize>::new();
    for (what, _) in skipped {
        *by_what.entry(what.as_str()).or_default() += 1;
    }
    let parts: Vec<String> = by_what.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    // A test may skip a part per server: count the tests once.
    let n = skipped.iter().map(|(_, t)| t).collect::<std::collections::BTreeSet<_>>().len();
    format!(
        "{n} test{} SKIPPED (SLUICE_TEST_SKIP_SERVICES=1): {}; the lines starting \"!!! SKIPPED\" above name them",
        if n == 1 { " was" } else { "s were" },
        parts.join(", ")
    )
}

/// This run's ledger: `target/<profile>/skipped-tests/<cargo's pid>`, found
/// from the test binary's path (`target/<profile>/deps/<binary>`).
fn ledger() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile = exe.parent()?.parent()?;
    Some(profile.join("skipped-tests").join(std::os::unix::process::parent_id().to_string()))
}

fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_by_server() {
        let s = summary(&[
            ("PostgreSQL".into(), "a".into()),
            ("MariaDB".into(), "b".into()),
            ("PostgreSQL".into(), "c".into()),
        ]);
        assert!(s.starts_with("3 tests were SKIPPED"), "{s}");
        assert!(s.contains("MariaDB: 1, PostgreSQL: 2"), "{s}");
        let one_test_two_servers = summary(&[("PostgreSQL".into(), "t".into()), ("MariaDB".into(), "t".into())]);
        assert!(one_test_two_servers.starts_with("1 test was SKIPPED"), "{one_test_two_servers}");
        assert!(summary(&[("moto_server".into(), "a".into())]).starts_with("1 test was SKIPPED"));
        assert!(summary(&[]).contains("no "), "zero says so");
    }

    #[test]
    fn a_name_stays_on_its_line() {
        assert_eq!(one_line("a\tb\nc"), "a b c");
    }
}
