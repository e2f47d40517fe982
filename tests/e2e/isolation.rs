//! Tenancy of files and connections: each organization's file and SQLite
//! connections live in its own directory, no path leads out of it (not
//! `..`, not an absolute path, not a symbolic link), no connection reaches
//! the service's own metadata store, no file is written in place through a
//! hard link, and a failed test answers a code, not what a foreign server
//! sent. On both metadata stores.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_tests::{Auth, Backend, TestApp, check, spawn_app};

async fn org(app: &TestApp, who: &Auth, name: &str) -> String {
    check!(app.post("/v1/organizations", who, json!({"name": name})).await, 201).id()
}

fn file_conn(name: &str, kind: &str, path: &str) -> Value {
    json!({"name": name, "type": kind, "capability": "both", "config": {"path": path}})
}

/// No message shows where the server keeps files.
fn assert_no_server_path(app: &TestApp, body: &Value) {
    let root = app.file_root().to_str().unwrap();
    let text = body.to_string();
    assert!(!text.contains(root) && !text.contains("/tmp/"), "a server path leaked: {text}");
}

async fn organizations_cannot_reach_each_others_files(app: TestApp) {
    let ann = app.token("ann@example.com");
    let bob = app.token("bob@example.com");
    let a = org(&app, &ann, "Alpha").await;
    let b = org(&app, &bob, "Beta").await;
    let a_dir = app.org_files(&a);
    std::fs::create_dir_all(a_dir.join("exports")).unwrap();
    std::fs::write(a_dir.join("exports/people.jsonl"), "{\"id\": 1, \"secret\": \"alpha-only\"}\n").unwrap();
    let a_conns = format!("/v1/organizations/{a}/connections");
    let b_conns = format!("/v1/organizations/{b}/connections");
    let a_files = check!(app.post(&a_conns, &ann, file_conn("exports", "file", "exports")).await, 201).id();
    let p = check!(app.post(&format!("{a_conns}/{a_files}/preview"), &ann, json!({"entity": "people"})).await, 200);
    assert_eq!(p.body["records"][0]["secret"], "alpha-only");

    // The same relative path names Beta's own (empty) directory.
    let b_same = check!(app.post(&b_conns, &bob, file_conn("exports", "file", "exports")).await, 201).id();
    let d = app.post(&format!("{b_conns}/{b_same}/discover"), &bob, json!({})).await;
    assert_eq!(d.status.as_u16(), 422, "{}", d.body);
    assert_no_server_path(&app, &d.body);
    let t = check!(app.post(&format!("{b_conns}/{b_same}/test"), &bob, json!({})).await, 200);
    assert_eq!(t.body["ok"], false);
    assert_no_server_path(&app, &t.body);

    // Paths that leave Beta's directory are refused when written.
    let a_abs = a_dir.join("exports").display().to_string();
    for (kind, path) in [
        ("file", format!("../{a}/exports")),
        ("file", a_abs.clone()),
        ("sqlite", format!("../{a}/warehouse.db")),
        ("sqlite", "/etc/passwd".to_string()),
        ("sqlite", "x/../../y.db".to_string()),
    ] {
        let r = app.post(&b_conns, &bob, file_conn("escape", kind, &path)).await;
        assert_eq!(r.status.as_u16(), 422, "{kind} {path}: {}", r.body);
        assert_eq!(r.body["details"]["errors"][0]["field"], "config.path", "{}", r.body);
        assert_no_server_path(&app, &r.body);
        let r = app.post(&format!("{b_conns}/test"), &bob, file_conn("escape", kind, &path)).await;
        assert_eq!(r.status.as_u16(), 422, "unsaved test of {path}: {}", r.body);
    }
    let r = app
        .send(Method::PATCH, &format!("{b_conns}/{b_same}"), &bob, Some(json!({"config": {"path": a_abs}})), &[])
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);

    // A symbolic link in Beta's directory leading into Alpha's is refused
    // when the connection is written, and when used if it appears later.
    let b_dir = app.org_files(&b);
    std::os::unix::fs::symlink(a_dir.join("exports"), b_dir.join("linked")).unwrap();
    let r = app.post(&b_conns, &bob, file_conn("linked", "file", "linked")).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_no_server_path(&app, &r.body);
    let later = check!(app.post(&b_conns, &bob, file_conn("later", "file", "later")).await, 201).id();
    std::os::unix::fs::symlink(a_dir.join("exports"), b_dir.join("later")).unwrap();
    let r = app.post(&format!("{b_conns}/{later}/preview"), &bob, json!({"entity": "people"})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert!(!r.body.to_string().contains("alpha-only"), "{}", r.body);
    assert_no_server_path(&app, &r.body);
    // A single file linked out of the directory is refused too.
    std::fs::create_dir_all(b_dir.join("mine")).unwrap();
    std::os::unix::fs::symlink(a_dir.join("exports/people.jsonl"), b_dir.join("mine/people.jsonl")).unwrap();
    let mine = check!(app.post(&b_conns, &bob, file_conn("mine", "file", "mine")).await, 201).id();
    let r = app.post(&format!("{b_conns}/{mine}/preview"), &bob, json!({"entity": "people"})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert!(!r.body.to_string().contains("alpha-only"), "{}", r.body);

    // IaC applies the same rule.
    let yaml = format!(
        "version: 1\nconnections:\n  - name: sneaky\n    type: sqlite\n    capability: both\n    config:\n      path: ../{a}/w.db\n"
    );
    let r = app
        .send_text(Method::POST, &format!("/v1/organizations/{b}/iac/apply"), &bob, &yaml, "application/x-yaml")
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_eq!(r.body["details"]["errors"][0]["field"], "connections[0].config.path", "{}", r.body);
}

async fn connections_to_the_metadata_store_are_refused(app: TestApp) {
    let ann = app.token("ann@example.com");
    let a = org(&app, &ann, "Alpha").await;
    let conns = format!("/v1/organizations/{a}/connections");
    match app.backend {
        Backend::Sqlite => {
            // A hard link to the store's file inside the organization's
            // directory stays inside it, and is still the store.
            let dir = app.org_files(&a);
            std::fs::hard_link(app.metadata_file().unwrap(), dir.join("meta.db")).unwrap();
            let r = app.post(&conns, &ann, file_conn("meta", "sqlite", "meta.db")).await;
            assert_eq!(r.status.as_u16(), 422, "{}", r.body);
            assert!(r.body.to_string().contains("metadata store"), "{}", r.body);
            // Linked after the connection was written: refused when used.
            let later = check!(app.post(&conns, &ann, file_conn("later", "sqlite", "later.db")).await, 201).id();
            std::fs::hard_link(app.metadata_file().unwrap(), dir.join("later.db")).unwrap();
            let t = check!(app.post(&format!("{conns}/{later}/test"), &ann, json!({})).await, 200);
            assert_eq!((t.body["ok"].clone(), t.body["error_code"].clone()), (json!(false), json!("metadata_store")));
            let d = app.post(&format!("{conns}/{later}/discover"), &ann, json!({})).await;
            assert_eq!(d.status.as_u16(), 422, "{}", d.body);
            assert_eq!(d.body["code"], "metadata_store");
        }
        Backend::Postgres => {
            let db = app.metadata_database.clone().unwrap();
            // Another role on the same database, spelled another way.
            let role = format!("probe_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
            sluice_tests::pg_exec(format!("CREATE ROLE {role} LOGIN")).await;
            let pg = |host: &str, user: &str| {
                json!({"name": format!("meta-{host}-{user}"), "type": "postgres", "capability": "both",
                       "config": {"host": host, "database": db, "user": user, "sslmode": "disable"}})
            };
            for (host, user) in [("127.0.0.1", "postgres"), ("localhost", "postgres"), ("127.0.0.1", role.as_str())] {
                let r = app.post(&conns, &ann, pg(host, user)).await;
                assert_eq!(r.status.as_u16(), 422, "{host} as {user}: {}", r.body);
                assert_eq!(r.body["details"]["errors"][0]["field"], "config.host", "{}", r.body);
                let mut unsaved = pg(host, user);
                unsaved.as_object_mut().unwrap().remove("name");
                let t = app.post(&format!("{conns}/test"), &ann, unsaved).await;
                assert_eq!(t.status.as_u16(), 422, "{}", t.body);
            }
            // Saved while the database could not be checked (a wrong port),
            // then pointed at the store: refused when changed.
            let mut away = pg("127.0.0.1", "postgres");
            away["config"]["port"] = json!(1);
            let c = check!(app.post(&conns, &ann, away).await, 201).id();
            let r = app
                .send(Method::PATCH, &format!("{conns}/{c}"), &ann, Some(json!({"config": {"port": 5432}})), &[])
                .await;
            assert_eq!(r.status.as_u16(), 422, "{}", r.body);
            sluice_tests::pg_exec(format!("DROP ROLE IF EXISTS {role}")).await;
            // Any other database on the same server is fine.
            let ok = check!(
                app.post(
                    &conns,
                    &ann,
                    json!({"name": "test-db", "type": "postgres", "capability": "source",
                "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "sslmode": "disable"}})
                )
                .await,
                201
            )
            .id();
            let t = check!(app.post(&format!("{conns}/{ok}/test"), &ann, json!({})).await, 200);
            assert_eq!(t.body["ok"], true, "{}", t.body);
        }
    }
}

async fn a_failed_test_reports_a_code_not_the_peers_bytes(app: TestApp) {
    let ann = app.token("ann@example.com");
    let a = org(&app, &ann, "Alpha").await;
    let test = format!("/v1/organizations/{a}/connections/test");
    let port: u16 = app.base.rsplit(':').next().unwrap().parse().unwrap();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for (kind, port, code) in
        [("postgres", port, "wrong_protocol"), ("mysql", port, "wrong_protocol"), ("postgres", closed, "refused")]
    {
        let mut config = json!({"host": "127.0.0.1", "port": port, "database": "x", "user": "u"});
        if kind == "postgres" {
            config["sslmode"] = json!("disable");
        }
        let t =
            check!(app.post(&test, &ann, json!({"type": kind, "capability": "source", "config": config})).await, 200);
        assert_eq!(t.body["ok"], false);
        assert_eq!(t.body["error_code"], code, "{kind} on {port}: {}", t.body);
        let text = t.body["error"].as_str().unwrap();
        assert!(!text.contains("HTTP") && !text.contains("0x") && !text.contains("SSLRequest"), "{text}");
    }
}

/// A hard link planted in an organization's directory names another file
/// (here another organization's): every path that writes a file in place
/// (an append, the entity's lock and its mark, a SQLite database) refuses
/// it, and the file it names is left as it was.
async fn hard_links_are_never_written_through(app: TestApp) {
    let ann = app.token("ann@example.com");
    let bob = app.token("bob@example.com");
    let a = org(&app, &ann, "Alpha").await;
    let b = org(&app, &bob, "Beta").await;
    let (a_dir, b_dir) = (app.org_files(&a), app.org_files(&b));
    std::fs::create_dir_all(a_dir.join("exports")).unwrap();
    let theirs = a_dir.join("exports/people.jsonl");
    let original = "{\"id\": 1, \"secret\": \"alpha-only\"}\n";
    std::fs::write(&theirs, original).unwrap();
    std::fs::create_dir_all(b_dir.join("src")).unwrap();
    std::fs::create_dir_all(b_dir.join("out")).unwrap();
    std::fs::write(b_dir.join("src/people.jsonl"), "{\"id\": 7, \"name\": \"beta\"}\n").unwrap();
    let conns = format!("/v1/organizations/{b}/connections");
    let src = check!(app.post(&conns, &bob, file_conn("src", "file", "src")).await, 201).id();
    let out = check!(app.post(&conns, &bob, file_conn("out", "file", "out")).await, 201).id();
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{b}/flows"),
            &bob,
            json!({"name": "people", "source_connection_id": src, "destination_connection_id": out,
                "config": {"mappings": [{"source_entity": "people", "sync_mode": "full_refresh_append"}]}})
        )
        .await,
        201
    )
    .id();
    for planted in ["people.jsonl", ".people.jsonl.lock"] {
        let _ = std::fs::remove_file(b_dir.join("out").join(planted));
        std::fs::hard_link(&theirs, b_dir.join("out").join(planted)).unwrap();
        let r = sluice_tests::run_flow(&app, &bob, &b, &flow).await;
        assert_eq!(r["status"], "failed", "{planted}: {r}");
        let error = r["entities"][0]["error"].as_str().unwrap_or_default();
        assert!(error.contains("more than one link"), "{planted}: {r}");
        assert!(!error.contains(a_dir.to_str().unwrap()), "{error}");
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), original, "{planted} wrote through the link");
        std::fs::remove_file(b_dir.join("out").join(planted)).unwrap();
    }
    // Beta's own files are written as usual.
    let r = sluice_tests::run_flow(&app, &bob, &b, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert!(std::fs::read_to_string(b_dir.join("out/people.jsonl")).unwrap().contains("beta"));
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), original);

    // A SQLite database linked from Alpha's directory is refused.
    let db = a_dir.join("w.db");
    std::fs::write(&db, b"not beta's").unwrap();
    std::fs::hard_link(&db, b_dir.join("w.db")).unwrap();
    for path in [format!("{conns}/test"), conns.clone()] {
        let r = app.post(&path, &bob, file_conn("w", "sqlite", "w.db")).await;
        assert_eq!(r.status.as_u16(), 422, "{}", r.body);
        assert_eq!(r.body["details"]["errors"][0]["field"], "config.path", "{}", r.body);
        assert!(r.body["error"].as_str().unwrap().contains("more than one link"), "{}", r.body);
        assert_no_server_path(&app, &r.body);
    }
    assert_eq!(std::fs::read(&db).unwrap(), b"not beta's");
}

sluice_tests::on_both_backends!(
    hard_links_are_never_written_through,
    organizations_cannot_reach_each_others_files,
    connections_to_the_metadata_store_are_refused,
    a_failed_test_reports_a_code_not_the_peers_bytes,
);
