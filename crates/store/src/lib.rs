//! Sluice's metadata store: the sea-orm adapter implementing the domain's
//! repository ports on SQLite (the embedded default) and PostgreSQL
//! (scale-out). Migrations run on [`Store::connect`].
//!
//! Every mutation opens one transaction that writes the change and its audit
//! entry. SQLite allows one writer at a time, so on SQLite write transactions
//! also take a process-wide lock instead of failing with `SQLITE_BUSY`.

/// Runs the body in one write transaction and records `audit` in it: the
/// change and its audit entry commit together or not at all (`?` or
/// `return Err(..)` in the body rolls both back).
macro_rules! audited {
    ($store:expr, $audit:expr, |$tx:ident| { $($body:tt)* }) => {
        written!($store, |$tx| {
            $($body)*
            $crate::insert_audit($tx.c(), $audit).await
        })
    };
}

/// Runs `body` (a block that ends in a `Result`) in one write transaction
/// of the store: committed when the result is `Ok`, rolled back otherwise.
macro_rules! written {
    ($store:expr, |$tx:ident| { $($body:tt)* }) => {{
        let $tx = $store.write().await?;
        let r = async { $($body)* }.await;
        $tx.finish(r).await
    }};
}

// One module per context of the domain (see docs/architecture.md).
mod billing;
mod catalog;
mod connect;
mod convert;
pub mod crypto;
mod entities;
mod iac;
mod identity;
mod meter;
mod monitoring;
mod sync;
pub mod wake;

use anyhow::Context;
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, SqlErr, TransactionTrait,
};
use sluice_domain::Error;
use sluice_migrations::{Migrator, MigratorTrait};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// One page of `q`, newest first by `id` (a time-ordered UUID): the rows
/// after the page's cursor, one more than the page holds, so that
/// `Page::from_overfetch` tells whether another follows.
pub(crate) async fn keyset<E, C>(
    db: &DatabaseConnection,
    q: sea_orm::Select<E>,
    id: C,
    page: sluice_domain::shared::page::PageRequest,
) -> Result<Vec<E::Model>, Error>
where
    E: sea_orm::EntityTrait,
    C: sea_orm::ColumnTrait,
{
    use sea_orm::{QueryFilter, QueryOrder, QuerySelect};
    let q = match page.after {
        Some(after) => q.filter(id.lt(after)),
        None => q,
    };
    q.order_by_desc(id).limit(page.limit + 1).all(db).await.map_err(db_err)
}

/// One page of `q` by [`keyset`], each row converted by `from`; the cursor
/// is the last item's `id_of`, the same key as the `id` column.
pub(crate) async fn keyset_page<E, C, T>(
    db: &DatabaseConnection,
    q: sea_orm::Select<E>,
    id: C,
    page: sluice_domain::shared::page::PageRequest,
    from: impl FnMut(E::Model) -> Result<T, Error>,
    id_of: impl Fn(&T) -> uuid::Uuid,
) -> Result<sluice_domain::shared::page::Page<T>, Error>
where
    E: sea_orm::EntityTrait,
    C: sea_orm::ColumnTrait,
{
    let items = keyset(db, q, id, page).await?.into_iter().map(from).collect::<Result<Vec<_>, _>>()?;
    Ok(sluice_domain::shared::page::Page::from_overfetch(items, page.limit, id_of))
}

/// The one row `q` finds, converted by `from`.
pub(crate) async fn first<E, T>(
    db: &impl sea_orm::ConnectionTrait,
    q: sea_orm::Select<E>,
    from: impl FnOnce(E::Model) -> Result<T, Error>,
) -> Result<Option<T>, Error>
where
    E: sea_orm::EntityTrait,
{
    q.one(db).await.map_err(db_err)?.map(from).transpose()
}

/// Every row `q` finds, converted by `from`.
pub(crate) async fn all<E, T>(
    db: &impl sea_orm::ConnectionTrait,
    q: sea_orm::Select<E>,
    from: impl FnMut(E::Model) -> Result<T, Error>,
) -> Result<Vec<T>, Error>
where
    E: sea_orm::EntityTrait,
{
    q.all(db).await.map_err(db_err)?.into_iter().map(from).collect()
}

/// Inserts `row` (an active model) in the transaction `c`.
pub(crate) async fn insert<A>(c: &impl sea_orm::ConnectionTrait, row: A) -> Result<(), Error>
where
    A: sea_orm::ActiveModelTrait + Send,
{
    <A::Entity as sea_orm::EntityTrait>::insert(row).exec_without_returning(c).await.map(|_| ()).map_err(db_err)
}

/// A table whose rows belong to an organization, by their `id`.
pub(crate) trait OrgTable: sea_orm::EntityTrait {
    const ID: Self::Column;
    const ORG: Self::Column;
}

/// An [`OrgTable`] whose names are unique within an organization.
pub(crate) trait NamedTable: OrgTable {
    const NAME: Self::Column;
}

macro_rules! org_table {
    ($($table:ident),*) => {$(
        impl OrgTable for entities::$table::Entity {
            const ID: Self::Column = entities::$table::Column::Id;
            const ORG: Self::Column = entities::$table::Column::OrgId;
        }
    )*};
}
org_table!(integrations, connections, flows, runs, data_assets, notification_rules);

macro_rules! named_table {
    ($($table:ident),*) => {$(
        impl NamedTable for entities::$table::Entity {
            const NAME: Self::Column = entities::$table::Column::Name;
        }
    )*};
}
named_table!(integrations, connections, flows);

/// The row `id` of organization `org`, converted by `from`.
pub(crate) async fn owned<E: OrgTable, T>(
    db: &impl sea_orm::ConnectionTrait,
    id: uuid::Uuid,
    org: uuid::Uuid,
    from: impl FnOnce(E::Model) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    use sea_orm::{ColumnTrait, QueryFilter};
    first(db, E::find().filter(E::ID.eq(id)).filter(E::ORG.eq(org)), from).await
}

/// The row named `name` in organization `org`, converted by `from`.
pub(crate) async fn named<E: NamedTable, T>(
    db: &impl sea_orm::ConnectionTrait,
    org: uuid::Uuid,
    name: &str,
    from: impl FnOnce(E::Model) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    use sea_orm::{ColumnTrait, QueryFilter};
    first(db, E::find().filter(E::ORG.eq(org)).filter(E::NAME.eq(name)), from).await
}

/// Deletes the row `id` of organization `org`; `NotFound` naming
/// `resource` when there is none.
pub(crate) async fn delete_owned<E: OrgTable>(
    c: &impl sea_orm::ConnectionTrait,
    id: uuid::Uuid,
    org: uuid::Uuid,
    resource: &'static str,
) -> Result<(), Error> {
    use sea_orm::{ColumnTrait, QueryFilter};
    let res = E::delete_many().filter(E::ID.eq(id)).filter(E::ORG.eq(org)).exec(c).await.map_err(db_err)?;
    if res.rows_affected == 0 {
        return Err(Error::not_found(resource));
    }
    Ok(())
}

/// How long PostgreSQL lets a metadata-store session sit inside a
/// transaction between statements before it ends the session. Our
/// transactions run their statements back to back (milliseconds); one
/// that idles is a process frozen or starved mid-transaction, and its row
/// locks (a run's row, by a fenced update or `FOR SHARE`) would otherwise
/// stop another process from taking its run over for as long as it stays
/// frozen. Its late commit then fails, as a fenced write should.
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// The metadata store's database engine.
pub use sea_orm::DbBackend as Backend;

/// The metadata store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: DatabaseConnection,
    write_lock: Option<Arc<Mutex<()>>>,
    cipher: crypto::Cipher,
    meter: Arc<meter::Meter>,
    wake: Arc<wake::Wake>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("backend", &self.backend()).finish()
    }
}

impl Store {
    /// Connects to `url` (`sqlite://…` or `postgres://…`) and brings the schema
    /// up to date. `master_key` encrypts stored credentials.
    ///
    /// # Errors
    /// When the database cannot be reached or a migration fails.
    pub async fn connect(url: &str, master_key: &[u8; 32]) -> anyhow::Result<Self> {
        let mut opts = ConnectOptions::new(url.to_string());
        opts.sqlx_logging(false).connect_timeout(Duration::from_secs(10)).acquire_timeout(Duration::from_secs(30));
        let sqlite = url.starts_with("sqlite:");
        if sqlite {
            opts.max_connections(8).min_connections(1).map_sqlx_sqlite_opts(|o| {
                o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(true)
            });
        } else {
            opts.max_connections(16).min_connections(1).map_sqlx_postgres_opts(|o| {
                o.options([("idle_in_transaction_session_timeout", format!("{}ms", IDLE_IN_TRANSACTION.as_millis()))])
            });
        }
        let db = Database::connect(opts)
            .await
            .with_context(|| format!("connecting to the metadata store at {}", redact_url(url)))?;
        Migrator::up(&db, None).await.context("running metadata-store migrations")?;
        Ok(Self {
            db,
            write_lock: sqlite.then(|| Arc::new(Mutex::new(()))),
            cipher: crypto::Cipher::new(master_key),
            meter: Arc::default(),
            wake: Arc::default(),
        })
    }

    /// What this process's worker and sender wait on besides their poll:
    /// woken when this process queues work, and, once [`Store::listen`]
    /// runs, when another process sharing a PostgreSQL store does.
    pub fn wake(&self) -> Arc<wake::Wake> {
        self.wake.clone()
    }

    /// On PostgreSQL, hears the work other processes queue (one `LISTEN`
    /// connection, kept until the process ends); nothing to do on SQLite,
    /// whose store has one process.
    pub fn listen(&self) {
        if self.backend() == DbBackend::Postgres {
            let pool = self.db.get_postgres_connection_pool().clone();
            tokio::spawn(wake::listen(pool, self.wake.clone()));
        }
    }

    pub fn backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    /// The service's instance id: written once at first start (a random
    /// UUID) and the same for every process sharing the store. On
    /// PostgreSQL it is also set as the database's comment, which every
    /// role connected to the database can read, so a connection that
    /// reaches this database under any name or user is recognised.
    ///
    /// # Errors
    /// When the store cannot be read or written.
    pub async fn instance_id(&self) -> anyhow::Result<String> {
        use sea_orm::{ConnectionTrait, Statement};
        let backend = self.backend();
        let fresh = uuid::Uuid::new_v4().to_string();
        let now = time::OffsetDateTime::now_utc();
        self.db
            .execute_raw(Statement::from_sql_and_values(
                backend,
                match backend {
                    DbBackend::Postgres => {
                        "INSERT INTO sluice_instance (id, created_at) SELECT $1, $2 \
                         WHERE NOT EXISTS (SELECT 1 FROM sluice_instance)"
                    }
                    _ => {
                        "INSERT INTO sluice_instance (id, created_at) SELECT ?, ? \
                         WHERE NOT EXISTS (SELECT 1 FROM sluice_instance)"
                    }
                },
                [fresh.into(), now.into()],
            ))
            .await
            .context("writing the instance id")?;
        let row = self
            .db
            .query_one_raw(Statement::from_string(
                backend,
                "SELECT id FROM sluice_instance ORDER BY created_at, id LIMIT 1",
            ))
            .await
            .context("reading the instance id")?
            .context("the instance id is missing")?;
        let id: String = row.try_get_by_index(0).context("reading the instance id")?;
        if backend == DbBackend::Postgres && uuid::Uuid::parse_str(&id).is_ok() {
            // Only the database's owner may comment on it; without that the
            // table alone marks the store (see docs/security.md).
            let marked = self
                .db
                .execute_unprepared(&format!(
                    "DO $$ BEGIN EXECUTE format('COMMENT ON DATABASE %I IS %L', current_database(), \
                     '{mark}{id}'); END $$",
                    mark = sluice_domain::connect::connector::INSTANCE_MARK
                ))
                .await;
            if let Err(e) = marked {
                tracing::warn!(error = %e, "cannot mark the metadata database with the instance id; \
                     give the service's role ownership of its database (docs/security.md)");
            }
        }
        Ok(id)
    }

    /// The underlying connection, for adapters that add their own tables.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// On SQLite, the process-wide write lock; nothing on PostgreSQL.
    async fn lock_writes(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.write_lock {
            Some(l) => Some(l.clone().lock_owned().await),
            None => None,
        }
    }

    /// Begins a write transaction.
    async fn write(&self) -> Result<Tx, Error> {
        let guard = self.lock_writes().await;
        let txn = self.db.begin().await.map_err(db_err)?;
        Ok(Tx { txn, _guard: guard, queued: wake::Pending::default(), wake: self.wake.clone() })
    }
}

/// A write transaction, holding SQLite's process-wide write lock while open.
struct Tx {
    txn: DatabaseTransaction,
    _guard: Option<OwnedMutexGuard<()>>,
    /// The work this transaction queues, woken once it commits.
    queued: wake::Pending,
    wake: Arc<wake::Wake>,
}

impl Tx {
    fn c(&self) -> &DatabaseTransaction {
        &self.txn
    }

    /// Notes that this transaction queues `work`: on PostgreSQL a `NOTIFY`
    /// the database sends to every listening process when (and only if)
    /// it commits; in this process, a wake after the commit.
    async fn queues(&self, work: wake::Work) -> Result<(), Error> {
        use sea_orm::ConnectionTrait;
        if self.txn.get_database_backend() == DbBackend::Postgres {
            self.txn.execute_unprepared(&format!("NOTIFY {}", work.channel())).await.map_err(db_err)?;
        }
        self.queued.add(work);
        Ok(())
    }

    /// Commits when `result` is `Ok`, rolls back otherwise.
    async fn finish<T>(self, result: Result<T, Error>) -> Result<T, Error> {
        match result {
            Ok(v) => {
                self.txn.commit().await.map_err(db_err)?;
                self.queued.wake(&self.wake);
                Ok(v)
            }
            Err(e) => {
                if let Err(re) = self.txn.rollback().await {
                    tracing::warn!(error = %re, "rollback failed");
                }
                Err(e)
            }
        }
    }
}

/// Writes an audit entry inside the caller's transaction, so the change and
/// its record commit or roll back together.
pub(crate) async fn insert_audit(
    c: &impl sea_orm::ConnectionTrait,
    e: &sluice_domain::shared::audit::AuditEntry,
) -> sluice_domain::Result<()> {
    use sea_orm::EntityTrait;
    entities::audit_logs::Entity::insert(convert::audit_model(e)).exec_without_returning(c).await.map_err(db_err)?;
    Ok(())
}

/// A database error in domain terms: unique violations are conflicts,
/// everything else is internal.
pub(crate) fn db_err(e: DbErr) -> Error {
    match e.sql_err() {
        Some(SqlErr::UniqueConstraintViolation(_)) => Error::conflict("a resource with these values already exists"),
        _ => Error::Internal(anyhow::Error::new(e)),
    }
}

/// A database URL with its password replaced, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_url_hides_the_password_only() {
        assert_eq!(super::redact_url("postgres://u:pw@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(super::redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::redact_url("sqlite://sluice.db?mode=rwc"), "sqlite://sluice.db?mode=rwc");
    }
}
