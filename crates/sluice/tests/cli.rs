//! The command line as a newcomer meets it: errors are one clear line.

mod common;

#[test]
fn a_bad_email_is_one_line_naming_the_option() {
    let data = std::env::temp_dir().join(format!("sluice-cli-{}", sluice_domain::shared::secret::random_base62(8)));
    let out = std::process::Command::new(common::sluice_bin())
        .args(["token", "--email", "notanemail"])
        .env("SLUICE_DATA_DIR", &data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "error: --email is not a valid e-mail address", "{err}");
    let _ = std::fs::remove_dir_all(&data);
}
