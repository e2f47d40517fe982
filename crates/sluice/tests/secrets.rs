//! Secrets stay with their owners, against the real binary: an Editor
//! cannot make the service send its own configuration (or any ungranted
//! environment value) to a server the Editor controls, and a server that
//! asks for a password in clear text over an unencrypted connection gets
//! nothing.

mod common;

use common::*;
use serde_json::{Value, json};
use sluice_domain::shared::secret::random_base62;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A hostile database server on the loopback that asks every client for
/// its password in clear text and keeps every byte a client sends after
/// that: PostgreSQL's `AuthenticationCleartextPassword`, or a MySQL
/// handshake naming `mysql_clear_password`.
struct CleartextServer {
    port: u16,
    received: Arc<Mutex<Vec<u8>>>,
}

/// A MySQL protocol-10 handshake (no TLS offered) whose auth plugin is
/// `mysql_clear_password`.
fn mysql_cleartext_handshake() -> Vec<u8> {
    let mut p = vec![0x0a];
    p.extend_from_slice(b"5.7.0\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh\0");
    // LONG_PASSWORD | CONNECT_WITH_DB | PROTOCOL_41 | SECURE_CONNECTION, then PLUGIN_AUTH.
    p.extend_from_slice(&0x8209u16.to_le_bytes());
    p.push(0x21);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&0x0008u16.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(b"ijklmnopqrst\0");
    p.extend_from_slice(b"mysql_clear_password\0");
    let mut packet = (p.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(0);
    packet.extend(p);
    packet
}

impl CleartextServer {
    /// A server on a free port: each client is `greeted` (up to the
    /// request for the clear-text password, `false` when the client went
    /// away), then what it sends next is kept.
    fn start(greet: fn(&mut std::net::TcpStream) -> bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    if greet(&mut s) {
                        keep_what_arrives(&mut s, &kept);
                    }
                });
            }
        });
        CleartextServer { port, received }
    }

    fn mysql() -> Self {
        Self::start(|s| s.write_all(&mysql_cleartext_handshake()).is_ok())
    }

    fn postgres() -> Self {
        Self::start(|s| {
            let read_message = |s: &mut std::net::TcpStream| -> Option<Vec<u8>> {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).ok()?;
                let n = u32::from_be_bytes(len) as usize;
                let mut body = vec![0; n.saturating_sub(4).min(1 << 16)];
                s.read_exact(&mut body).ok()?;
                Some(body)
            };
            let Some(first) = read_message(s) else { return false };
            if first.get(..4) == Some(&80_877_103u32.to_be_bytes()[..]) {
                // SSLRequest: no TLS here; then the startup message.
                let _ = s.write_all(b"N");
                if read_message(s).is_none() {
                    return false;
                }
            }
            // AuthenticationCleartextPassword.
            s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).is_ok()
        })
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

/// Keeps what the client sends next, then hangs up.
fn keep_what_arrives(s: &mut std::net::TcpStream, kept: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 4096];
    if let Ok(n) = s.read(&mut buf) {
        kept.lock().unwrap().extend_from_slice(&buf[..n]);
    }
}

/// A server with `extra` settings, an organization and an Editor key in
/// it: (process, data dir, base URL, org id, Editor key).
async fn serve_with(extra: &[(&'static str, String)]) -> (Proc, std::path::PathBuf, String, String, String) {
    let data = std::env::temp_dir().join(format!("sluice-secrets-{}", random_base62(8).to_lowercase()));
    std::fs::create_dir_all(&data).unwrap();
    let db = format!("sqlite://{}?mode=rwc", data.join("meta.db").display());
    let port = free_port();
    let mut vars = env(&data, &db, port);
    vars.extend(extra.iter().cloned());
    vars.push(("TENANT_PG_PASSWORD", "granted-tenant-password".into()));
    let proc = spawn(&["serve"], &vars);
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    wait_healthy(&api.client, &api.base).await;
    let org = api.post("/v1/organizations", json!({"name": "Mallory"})).await["id"].as_str().unwrap().to_string();
    let key = api.post(&format!("/v1/organizations/{org}/api-keys"), json!({"name": "ed", "roles": ["Editor"]})).await;
    (proc, data, api.base, org, key["key"].as_str().unwrap().to_string())
}

async fn as_editor(http: &reqwest::Client, base: &str, key: &str, path: &str, body: Value) -> (u16, Value) {
    let res = http.post(format!("{base}{path}")).header("X-Api-Key", key).json(&body).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn pg_body(port: u16, password: &str, sslmode: &str) -> Value {
    json!({"name": "evil", "type": "postgres", "capability": "source",
        "config": {"host": "127.0.0.1", "port": port, "database": "x", "user": "u", "password": password, "sslmode": sslmode}})
}

#[tokio::test]
async fn an_editor_cannot_read_the_services_own_environment() {
    let server = CleartextServer::postgres();
    let http = client();
    for grants in ["", "*"] {
        let (proc, data, base, org, key) = serve_with(&[("SLUICE_ENV_REFS_ALLOW", grants.to_string())]).await;
        for name in ["SLUICE_JWT_HS256_SECRET", "SLUICE_MASTER_KEY", "SLUICE_DATABASE_URL", "TENANT_PG_PASSWORD"] {
            if grants == "*" && name == "TENANT_PG_PASSWORD" {
                continue;
            }
            let reference = format!("env:{name}");
            for path in
                [format!("/v1/organizations/{org}/connections/test"), format!("/v1/organizations/{org}/connections")]
            {
                let (status, body) =
                    as_editor(&http, &base, &key, &path, pg_body(server.port, &reference, "disable")).await;
                assert_eq!(status, 422, "{grants:?} {path} {reference}: {body}");
                assert_eq!(body["details"]["errors"][0]["field"], "config.password", "{body}");
                assert!(body.to_string().contains(&reference), "the refusal names the reference: {body}");
            }
        }
        let yaml = format!(
            "version: \"1\"\nconnections:\n  - {{name: evil, type: postgres, capability: source, config: {{host: 127.0.0.1, port: {}, database: x, user: u, password: \"env:SLUICE_MASTER_KEY\", sslmode: disable}}}}\n",
            server.port
        );
        let res = http
            .post(format!("{base}/v1/organizations/{org}/iac/apply"))
            .header("X-Api-Key", &key)
            .header("Content-Type", "application/x-yaml")
            .body(yaml)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 422);
        drop(proc);
        let _ = std::fs::remove_dir_all(&data);
    }
    let seen = server.received();
    for secret in [SECRET, MASTER_KEY, "meta.db"] {
        assert!(!seen.contains(secret), "the hostile server received {secret}: {seen:?}");
    }
}

#[tokio::test]
async fn a_server_asking_for_a_clear_text_password_gets_nothing() {
    const PASSWORD: &str = "hunter2-plain-password";
    let (pg, my) = (CleartextServer::postgres(), CleartextServer::mysql());
    let (proc, data, base, org, key) = serve_with(&[]).await;
    let http = client();
    let test = format!("/v1/organizations/{org}/connections/test");
    let mysql_body = |ssl_mode: &str| {
        json!({"name": "evil", "type": "mysql", "capability": "source",
            "config": {"host": "127.0.0.1", "port": my.port, "database": "x", "user": "u", "password": PASSWORD, "ssl_mode": ssl_mode}})
    };
    let bodies = [
        pg_body(pg.port, PASSWORD, "disable"),
        pg_body(pg.port, PASSWORD, "prefer"),
        mysql_body("disabled"),
        mysql_body("preferred"),
    ];
    for body in bodies {
        let (status, t) = as_editor(&http, &base, &key, &test, body.clone()).await;
        assert_eq!(status, 200, "{t}");
        assert_eq!(t["ok"], false, "{body}: {t}");
        assert_eq!(t["error_code"], "tls", "{body}: {t}");
        assert!(t["error"].as_str().unwrap().contains("clear text"), "{t}");
    }
    // Creating a PostgreSQL connection reaches its host too (is it the
    // metadata store?): nothing is sent there either.
    let (status, c) = as_editor(
        &http,
        &base,
        &key,
        &format!("/v1/organizations/{org}/connections"),
        pg_body(pg.port, PASSWORD, "prefer"),
    )
    .await;
    assert_eq!(status, 201, "{c}");
    for server in [&pg, &my] {
        assert!(!server.received().contains(PASSWORD), "the password was sent in clear text: {:?}", server.received());
    }

    // A connection that allows it sends the password: the hostile servers
    // above would have seen it.
    let mut allowed = pg_body(pg.port, PASSWORD, "disable");
    allowed["config"]["allow_cleartext_password"] = json!(true);
    let mut allowed_my = mysql_body("disabled");
    allowed_my["config"]["allow_cleartext_password"] = json!(true);
    for body in [allowed, allowed_my] {
        let (status, t) = as_editor(&http, &base, &key, &test, body).await;
        assert_eq!((status, &t["ok"]), (200, &json!(false)), "{t}");
    }
    assert!(pg.received().contains(PASSWORD), "{:?}", pg.received());
    assert!(my.received().contains(PASSWORD), "{:?}", my.received());

    // An Editor who moves a connection's stored password to such a server
    // (the stored secret kept as "***") is refused before anything is sent:
    // the reach check of a changed connection carries no secret.
    const STORED: &str = "stored-secret-never-sent";
    let conns = format!("/v1/organizations/{org}/connections");
    let mut legit = pg_body(free_port(), STORED, "disable");
    legit["name"] = json!("legit");
    let (status, c) = as_editor(&http, &base, &key, &conns, legit).await;
    assert_eq!(status, 201, "{c}");
    let moved = json!({"config": {"port": pg.port, "allow_cleartext_password": true, "password": "***"}});
    let res = http
        .patch(format!("{base}{conns}/{}", c["id"].as_str().unwrap()))
        .header("X-Api-Key", &key)
        .json(&moved)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 422);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pg.received().contains(STORED), "the stored password was sent: {:?}", pg.received());
    drop(proc);
    let _ = std::fs::remove_dir_all(&data);
}

/// A DuckLake whose catalog is on PostgreSQL: the catalog's password is a
/// credential (`catalog.password`, read back as `***` inside the catalog),
/// a server that asks for it in clear text gets nothing, and moving the
/// catalog elsewhere with the stored password kept is refused.
#[tokio::test]
async fn a_ducklake_catalogs_password_is_a_credential_sent_nowhere_it_was_not_given_for() {
    const PASSWORD: &str = "lake-catalog-password-42";
    let pg = CleartextServer::postgres();
    let (proc, data, base, org, key) = serve_with(&[]).await;
    let http = client();
    let conns = format!("/v1/organizations/{org}/connections");
    let body = |port: u16| {
        json!({"name": "lake", "type": "ducklake", "capability": "destination", "config": {
            "catalog": {"type": "postgres", "host": "127.0.0.1", "port": port, "database": "x", "user": "u",
                "password": PASSWORD, "sslmode": "prefer"},
            "data_path": "lake/data"}})
    };
    let (status, t) = as_editor(&http, &base, &key, &format!("{conns}/test"), body(pg.port)).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["ok"], false, "{t}");
    assert!(!t.to_string().contains(PASSWORD), "{t}");
    assert!(!pg.received().contains(PASSWORD), "the catalog's password was sent in clear text: {:?}", pg.received());

    let (status, c) = as_editor(&http, &base, &key, &conns, body(free_port())).await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["config"]["catalog"]["password"], "***", "{c}");
    assert!(!c.to_string().contains(PASSWORD), "{c}");
    let listed = http.get(format!("{base}{conns}")).header("X-Api-Key", &key).send().await.unwrap();
    let listed = listed.text().await.unwrap();
    assert!(!listed.contains(PASSWORD) && listed.contains("***"), "{listed}");
    // The catalog moved to the hostile server, the password kept as read.
    let moved = json!({"config": {"catalog": {"type": "postgres", "host": "127.0.0.1", "port": pg.port,
        "database": "x", "user": "u", "password": "***", "sslmode": "disable"}}});
    let res = http
        .patch(format!("{base}{conns}/{}", c["id"].as_str().unwrap()))
        .header("X-Api-Key", &key)
        .json(&moved)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let said = res.text().await.unwrap();
    assert_eq!(status, 422, "{said}");
    assert!(said.contains("catalog.password"), "the refusal names the credential to give again: {said}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pg.received().contains(PASSWORD), "the stored password was sent: {:?}", pg.received());
    drop(proc);
    let _ = std::fs::remove_dir_all(&data);
}
