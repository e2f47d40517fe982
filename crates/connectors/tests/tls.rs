//! TLS to database servers: a PostgreSQL server of the test's own, started
//! with a certificate signed by a CA made in the test, checked with every
//! `sslmode`; and MariaDB's `ssl_mode`. A failure naming what is missing (the
//! PostgreSQL binaries, `openssl`, `runuser`) unless `SLUICE_TEST_SKIP_SERVICES=1`
//! skips it loudly.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use sluice_testkit::services::{OwnPostgres, run};
use std::path::Path;
use std::process::Command;

mod common;
use common::*;

fn skip(what: &str, why: impl std::fmt::Display, start: &str) {
    unavailable(what, why, start);
}

/// A CA, and a server certificate it signs for `localhost` (no address).
fn certificates(dir: &Path, ca: &str) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(Command::new("openssl").current_dir(dir).args(["req", "-x509"]).args(ec).args([
        "-keyout",
        &format!("{ca}.key"),
        "-out",
        &format!("{ca}.crt"),
        "-days",
        "2",
        "-subj",
        &format!("/CN={ca}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]));
}

fn server_certificate(dir: &Path, ca: &str) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(Command::new("openssl").current_dir(dir).arg("req").args(ec).args([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]));
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(Command::new("openssl").current_dir(dir).args([
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        &format!("{ca}.crt"),
        "-CAkey",
        &format!("{ca}.key"),
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]));
}

/// A PostgreSQL server of the test's own, with a certificate `test-ca` signed.
async fn start_tls_postgres() -> Option<OwnPostgres> {
    if Command::new("which").arg("openssl").output().map(|o| !o.status.success()).unwrap_or(true) {
        skip("openssl", "not on the PATH", "install openssl");
        return None;
    }
    let prepare = |dir: &Path| {
        certificates(dir, "test-ca");
        certificates(dir, "other-ca");
        server_certificate(dir, "test-ca");
        run(Command::new("chmod").args(["0600", dir.join("server.key").to_str().unwrap()]));
    };
    tokio::task::spawn_blocking(move || {
        OwnPostgres::start(prepare, |dir| {
            vec![
                "ssl=on".to_string(),
                format!("ssl_cert_file={}", dir.join("server.crt").display()),
                format!("ssl_key_file={}", dir.join("server.key").display()),
            ]
        })
    })
    .await
    .unwrap()
}

async fn check(registry: &Registry, c: serde_json::Value) -> ConnectorResult<()> {
    registry.source(&config("postgres", c)).await?.check().await
}

#[tokio::test]
async fn postgres_verifies_the_servers_certificate_as_sslmode_says() {
    let Some(pg) = start_tls_postgres().await else { return };
    let ca = std::fs::read_to_string(pg.dir.join("test-ca.crt")).unwrap();
    let other = std::fs::read_to_string(pg.dir.join("other-ca.crt")).unwrap();
    let registry = Registry::new(std::env::temp_dir());
    let pg_config = |host: &str, mode: &str, ca: Option<&str>| {
        let mut c = json!({"host": host, "port": pg.port, "database": "postgres", "user": "postgres", "sslmode": mode});
        if let Some(ca) = ca {
            c["ssl_ca"] = json!(ca);
        }
        c
    };
    // Verified: the right CA, and for verify-full the right name.
    check(&registry, pg_config("localhost", "verify-full", Some(&ca))).await.unwrap();
    check(&registry, pg_config("127.0.0.1", "verify-ca", Some(&ca))).await.unwrap();
    check(&registry, pg_config("127.0.0.1", "require", None)).await.unwrap();
    // Refused, as a TLS failure: another name, another CA, no CA.
    for (host, mode, ca) in [
        ("127.0.0.1", "verify-full", Some(ca.as_str())),
        ("localhost", "verify-full", Some(other.as_str())),
        ("localhost", "verify-ca", Some(other.as_str())),
        ("localhost", "verify-full", None),
    ] {
        let e = check(&registry, pg_config(host, mode, ca)).await.unwrap_err();
        assert!(matches!(e, ConnectorError::Tls(_)), "{host} {mode}: {e:?}");
        assert!(!e.to_string().contains("BEGIN CERTIFICATE"), "{e}");
    }
    // Not a certificate: refused before connecting.
    let e = check(&registry, pg_config("localhost", "verify-full", Some("/etc/ssl/certs/ca.pem"))).await.unwrap_err();
    assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
    let e = check(&registry, pg_config("localhost", "verify-sometimes", None)).await.unwrap_err();
    assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
}

#[tokio::test]
async fn an_unverifiable_server_fails_a_verified_connection_and_mysql_takes_ssl_mode() {
    use sqlx::Connection;
    let registry = Registry::new(std::env::temp_dir());
    // The machine's own PostgreSQL offers at most a certificate no CA of
    // the system's vouches for (Debian's snakeoil), and MariaDB no TLS.
    match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(_) => {
            let c = json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "sslmode": "verify-full"});
            let e = check(&registry, c).await.unwrap_err();
            assert!(matches!(e, ConnectorError::Tls(_)), "{e:?}");
        }
        Err(e) => skip("PostgreSQL on 127.0.0.1:5432", e, "start it"),
    }
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(_) => {
            let my = |mode: &str| json!({"host": "127.0.0.1", "database": "test", "user": "root", "ssl_mode": mode});
            for ok in ["disabled", "preferred"] {
                registry.source(&config("mysql", my(ok))).await.unwrap().check().await.unwrap();
            }
            let e = registry.source(&config("mysql", my("verify_identity"))).await.unwrap().check().await.unwrap_err();
            assert!(matches!(e, ConnectorError::Tls(_)), "{e:?}");
            let Err(e) = registry.source(&config("mysql", my("sometimes"))).await else { panic!("accepted") };
            assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
        }
        Err(e) => skip("MariaDB on 127.0.0.1:3306", e, "start it"),
    }
}
