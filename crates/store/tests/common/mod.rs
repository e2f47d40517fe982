//! What the store tests share: a fresh PostgreSQL database per test, and
//! an organization to work in.

#![allow(dead_code)] // each test file uses its part

use sea_orm::{ConnectionTrait, Database};

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

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
            sluice_testkit::services::unavailable("PostgreSQL on 127.0.0.1:5432", e, "start it");
            return None;
        }
    };
    let name = format!("{prefix}_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.unwrap();
    Some((Db(name.clone()), format!("postgres://postgres@127.0.0.1:5432/{name}")))
}

/// A new organization "Acme" (slug `acme-<random>`) with a new user as its
/// Admin, created at `now`.
pub async fn new_org(
    store: &sluice_store::Store,
    now: time::OffsetDateTime,
) -> sluice_domain::identity::org::Organization {
    use sluice_domain::identity::ports::{OrgRepository, UserRepository};
    use sluice_domain::shared::secret::random_base62;
    let claims = sluice_domain::identity::user::VerifiedClaims {
        issuer: "i".into(),
        subject: random_base62(6),
        email: None,
        name: None,
    };
    let user = store.upsert_from_claims(&claims, now).await.unwrap();
    let org = sluice_domain::identity::org::Organization {
        id: sluice_domain::shared::ids::OrgId::new(),
        name: "Acme".into(),
        slug: format!("acme-{}", random_base62(6).to_lowercase()),
        created_at: now,
    };
    let audit = sluice_domain::shared::audit::AuditEntry::new(
        Some(org.id),
        sluice_domain::shared::audit::Actor::system(),
        "organization.created",
        "organization",
        org.id,
        now,
    );
    OrgRepository::create(store, &org, user.id, &audit).await.unwrap();
    org
}
