//! `sluice apply` and `sluice export` as a user runs them, against a real
//! `sluice` server process: a three-connection, five-flow document applied
//! to a fresh organization, re-applied, edited and dry-run, refused with
//! its paths, exported and applied back unchanged.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

const DOC: &str = r#"version: "1"
integrations:
  - name: app-creds
    type: postgres
    credentials:
      password: env:APP_DB_PASSWORD
connections:
  - name: app-db
    integration: app-creds
    type: postgres
    capability: source
    config: {host: db.internal, database: app, user: reader}
  - name: warehouse
    type: postgres
    capability: both
    config: {host: dw.internal, database: dw, user: loader, password: "***"}
  - name: lake
    type: file
    capability: destination
    config: {path: lake, format: jsonl}
flows:
  - name: orders
    source_connection: app-db
    destination_connection: warehouse
    schedule: "*/15 * * * *"
    config:
      mappings:
        - {source_entity: orders, sync_mode: incremental_deduped, cursor_field: updated_at, primary_key: id}
        - {source_entity: order_items, sync_mode: incremental_deduped, cursor_field: updated_at, primary_key: "order_id, line"}
  - name: customers
    source_connection: app-db
    destination_connection: warehouse
    schedule: "0 * * * *"
    config:
      mappings: [{source_entity: customers, sync_mode: incremental_append, cursor_field: id}]
  - name: revenue-rollup
    source_connection: warehouse
    destination_connection: warehouse
    config:
      mappings: [{source_entity: orders, dest_entity: revenue_daily, sync_mode: full_refresh_overwrite}]
      depends_on: [{flow: orders, on: success}, {flow: customers, on: success}]
  - name: orders-to-lake
    source_connection: warehouse
    destination_connection: lake
    config:
      mappings: [{source_entity: orders, sync_mode: full_refresh_append}]
      depends_on: [{flow: orders, on: completion}]
  - name: failure-audit
    source_connection: app-db
    destination_connection: lake
    config:
      mappings: [{source_entity: audit_events, sync_mode: full_refresh_overwrite}]
      depends_on: [{flow: revenue-rollup, on: failure}]
"#;

fn cli(args: &[&str], base: &str, key: Option<&str>) -> Output {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args).env("SLUICE_URL", base).env("RUST_LOG", "warn").env_remove("SLUICE_API_KEY");
    if let Some(k) = key {
        cmd.env("SLUICE_API_KEY", k);
    }
    cmd.output().unwrap()
}

fn show(what: &str, o: &Output) -> (String, String) {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    eprintln!("$ {what}  (exit {:?})\n{out}{err}", o.status.code());
    (out, err)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A server on a fresh SQLite store with organization `name` and an
/// Editor key of it: (data directory, the process, base URL, a session
/// client, organization id, key).
async fn server_with_key(tag: &str, name: &str) -> (std::path::PathBuf, Proc, String, Api, String, String) {
    let dir = std::env::temp_dir().join(format!("sluice-{tag}-{}", sluice_domain::shared::secret::random_base62(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let db = format!("sqlite://{}?mode=rwc", dir.join("meta.db").display());
    // The document's secret reference, granted by the operator.
    let mut vars = env(&dir, &db, port);
    vars.push(("SLUICE_ENV_REFS_ALLOW", "APP_DB_PASSWORD".into()));
    let server = spawn(&["serve"], &vars);
    let base = format!("http://127.0.0.1:{port}");
    let api = Api { client: client(), base: base.clone(), token: token() };
    wait_healthy(&api.client, &base).await;
    let org = api.post("/v1/organizations", json!({"name": name})).await["id"].as_str().unwrap().to_string();
    let key = api.post(&format!("/v1/organizations/{org}/api-keys"), json!({"name": "ci", "roles": ["Editor"]})).await
        ["key"]
        .as_str()
        .unwrap()
        .to_string();
    (dir, server, base, api, org, key)
}

#[tokio::test]
async fn sluice_apply_plans_applies_and_exports_against_a_running_server() {
    let (dir, _server, base, api, org, key) = server_with_key("apply", "IaC Test").await;
    let file = write(&dir, "sluice.yaml", DOC);

    // First apply on a fresh organization: everything is created.
    let o = cli(&["apply", "-f", &file, "--org", &org], &base, Some(&key));
    let (out, _) = show("sluice apply -f sluice.yaml", &o);
    assert!(o.status.success());
    assert!(out.contains("9 to create, 0 to update, 0 unchanged. Applied."), "{out}");
    let flows = api.get(&format!("/v1/organizations/{org}/flows")).await;
    assert_eq!(flows["data"].as_array().unwrap().len(), 5);

    // Again: nothing to do.
    let o = cli(&["apply", "-f", &file, "--org", &org], &base, Some(&key));
    let (out, _) = show("sluice apply -f sluice.yaml  (again)", &o);
    assert!(o.status.success());
    assert!(out.contains("0 to create, 0 to update, 9 unchanged. Nothing to do."), "{out}");

    // One edit, dry run: the diff is shown and nothing is written.
    let edited = write(&dir, "edited.yaml", &DOC.replace("schedule: \"0 * * * *\"", "schedule: \"30 */2 * * *\""));
    let o = cli(&["apply", "-f", &edited, "--org", &org, "--dry-run"], &base, Some(&key));
    let (out, _) = show("sluice apply -f edited.yaml --dry-run", &o);
    assert!(o.status.success());
    assert!(out.contains("~ schedule: \"0 * * * *\" -> \"30 */2 * * *\""), "{out}");
    assert!(out.contains("0 to create, 1 to update, 8 unchanged. Dry run: nothing was written."), "{out}");
    let customers = api.get(&format!("/v1/organizations/{org}/flows")).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "customers")
        .unwrap()
        .clone();
    assert_eq!(customers["schedule"], "0 * * * *");

    // A broken document: non-zero exit, each problem with its path.
    let broken = write(
        &dir,
        "broken.yaml",
        &DOC.replace(
            "destination_connection: lake\n    config:\n      mappings: [{source_entity: audit_events",
            "destination_connection: pond\n    config:\n      mappings: [{source_entity: audit_events",
        ),
    );
    let o = cli(&["apply", "-f", &broken, "--org", &org], &base, Some(&key));
    let (_, err) = show("sluice apply -f broken.yaml", &o);
    assert!(!o.status.success());
    assert!(err.contains("flows[4].destination_connection: no connection 'pond'"), "{err}");
    let o =
        cli(&["apply", "-f", &write(&dir, "bad.yaml", "version: '1'\nflows: [\n"), "--org", &org], &base, Some(&key));
    let (_, err) = show("sluice apply -f bad.yaml", &o);
    assert!(!o.status.success() && err.contains("malformed_yaml") && err.contains("line"), "{err}");
    let o = cli(&["apply", "-f", &file, "--org", &org], &base, None);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("SLUICE_API_KEY"));

    // Export, then apply the export: unchanged, and no secret in it.
    let o = cli(&["export", "--org", &org], &base, Some(&key));
    let (exported, _) = show("sluice export", &o);
    assert!(o.status.success());
    assert!(!exported.contains("APP_DB_PASSWORD"), "{exported}");
    let round = write(&dir, "exported.yaml", &exported);
    let o = cli(&["apply", "-f", &round, "--org", &org], &base, Some(&key));
    let (out, _) = show("sluice apply -f exported.yaml", &o);
    assert!(out.contains("0 to create, 0 to update, 9 unchanged."), "{out}");

    // The unreachable server is a clear error, not a hang.
    let o = cli(
        &["apply", "-f", &file, "--org", &org, "--dry-run"],
        &format!("http://127.0.0.1:{}", free_port()),
        Some(&key),
    );
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("cannot reach"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sluice_run_follow_orgs_and_logs_against_a_running_server() {
    let (dir, _server, base, api, org, key) = server_with_key("run", "Runs").await;
    let files = dir.join("files").join(&org).join("in");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("items.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    std::fs::write(files.join("gone.jsonl"), "{\"id\": 1}\n").unwrap();
    let conn = api
        .post(
            &format!("/v1/organizations/{org}/connections"),
            json!({"name": "in", "type": "file", "capability": "both", "config": {"path": "in", "format": "jsonl"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mapping = |entity: &str| json!({"mappings": [{"source_entity": entity, "dest_entity": format!("{entity}_copy"), "sync_mode": "full_refresh_overwrite"}]});
    for (name, entity) in [("copy", "items"), ("broken", "gone")] {
        api.post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": name, "source_connection_id": conn, "destination_connection_id": conn, "config": mapping(entity)}),
        )
        .await;
    }

    let o = cli(&["orgs"], &base, Some(&key));
    let (out, _) = show("sluice orgs", &o);
    assert!(o.status.success() && out.contains(&org) && out.contains("Runs"), "{out}");

    let o = cli(&["run", "copy", "--org", &org, "--follow"], &base, Some(&key));
    let (out, err) = show("sluice run copy --follow", &o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("INFO") && out.contains("run started"), "the log is printed: {out}");
    assert!(err.contains("succeeded (2 rows written)"), "{err}");
    let run = err.split_whitespace().nth(1).unwrap().to_string();

    let o = cli(&["logs", &run, "--org", &org], &base, Some(&key));
    let (out, _) = show("sluice logs RUN", &o);
    assert!(o.status.success() && out.lines().count() >= 2, "{out}");

    // The source of "broken" goes away after the flow was made.
    std::fs::remove_file(files.join("gone.jsonl")).unwrap();
    let o = cli(&["run", "broken", "--org", &org, "--follow"], &base, Some(&key));
    let (_, err) = show("sluice run broken --follow", &o);
    assert!(!o.status.success(), "a failed run fails the command");
    assert!(err.lines().last().unwrap().starts_with("error: run ") && err.contains("failed"), "{err}");
    let o = cli(&["run", "nope", "--org", &org], &base, Some(&key));
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim(), "error: no flow named 'nope' in the organization");
    let _ = std::fs::remove_dir_all(&dir);
}
