//! A fresh PostgreSQL database per test.

use sea_orm::{ConnectionTrait, Database};

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[allow(clippy::disallowed_methods)] // a test switch, not configuration
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

pub struct Db(String);

impl Drop for Db {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(db) = Database::connect(ADMIN).await {
                    let _ = db.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
                }
            })
        })
        .join();
    }
}

/// A fresh database named `<prefix>_<random>`, dropped when the guard goes;
/// `None` (after a loud message) when PostgreSQL is unreachable outside CI.
pub async fn fresh(prefix: &str) -> Option<(Db, String)> {
    let admin = match Database::connect(ADMIN).await {
        Ok(a) => a,
        Err(e) => {
            assert!(!in_ci(), "PostgreSQL is unreachable in CI: {e}");
            eprintln!("\n!!! SKIPPED: PostgreSQL is unreachable ({e})\n");
            return None;
        }
    };
    let name = format!("{prefix}_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.unwrap();
    Some((Db(name.clone()), format!("postgres://postgres@127.0.0.1:5432/{name}")))
}
