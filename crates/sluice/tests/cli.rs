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

#[test]
fn a_bad_entity_concurrency_is_one_line_naming_the_variable() {
    let data = std::env::temp_dir().join(format!("sluice-cli-{}", sluice_domain::shared::secret::random_base62(8)));
    for bad in ["0", "65", "four"] {
        let out = std::process::Command::new(common::sluice_bin())
            .args(["token", "--email", "ann@example.com"])
            .env("SLUICE_DATA_DIR", &data)
            .env("SLUICE_ENTITY_CONCURRENCY", bad)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim(),
            format!("error: SLUICE_ENTITY_CONCURRENCY must be a whole number from 1 to 64, not '{bad}'"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_login_link_names_the_public_url_and_lives_a_day_at_most() {
    let data = std::env::temp_dir().join(format!("sluice-cli-{}", sluice_domain::shared::secret::random_base62(8)));
    let link = |args: &[&str]| {
        std::process::Command::new(common::sluice_bin())
            .args(args)
            .env("SLUICE_DATA_DIR", &data)
            .env("SLUICE_PUBLIC_URL", "https://sluice.example.com/")
            .output()
            .unwrap()
    };
    let out = link(&["login-link", "--email", "ann@example.com"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let url = String::from_utf8(out.stdout).unwrap();
    assert!(url.trim().starts_with("https://sluice.example.com/login/link?token="), "{url}");
    let out = link(&["login-link", "--email", "ann@example.com", "--ttl", "2d"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "error: --ttl is at most 24 hours for a login link");
    let out = link(&["login-link", "--email", "nope"]);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "error: --email is not a valid e-mail address");
    let _ = std::fs::remove_dir_all(&data);
}
