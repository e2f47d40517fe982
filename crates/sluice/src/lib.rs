//! The Sluice application: settings, telemetry and the wiring of adapters to
//! the domain's ports. `main.rs` is a thin CLI over this, and the end-to-end
//! tests build the same [`Application`].

pub mod client;
pub mod settings;
pub mod telemetry;
pub mod worker;

use actix_web::HttpServer;
use anyhow::Context;
use settings::Settings;
use sluice_auth::{JwksSource, JwtVerifier, VerifierConfig};
use sluice_domain::app::{Ports, Sluice};
use sluice_domain::shared::clock::SystemClock;
use sluice_http::AppState;
use sluice_store::Store;
use std::net::TcpListener;
use std::sync::Arc;

/// Mints the console's sessions and signs its login links with the HS256
/// secret (a server verifying only an identity provider's JWKS has none:
/// then a pasted token is the console's one way in).
pub struct ConsoleSessions {
    issuer: sluice_auth::TokenIssuer,
    link_key: Vec<u8>,
}

impl ConsoleSessions {
    pub fn from_settings(settings: &Settings) -> Option<Self> {
        let secret = settings.jwt_hs256_secret.as_ref()?.expose().as_bytes().to_vec();
        // Its own key: a login link is no session token, nor the reverse.
        let link_key =
            sluice_domain::shared::secret::sha256_hex(&[b"sluice login link\0", &secret[..]].concat()).into_bytes();
        let issuer = sluice_auth::TokenIssuer::new(secret, settings.jwt_issuer.clone(), settings.jwt_audience.clone());
        Some(Self { issuer, link_key })
    }

    /// A one-time sign-in URL for `email`, valid for `ttl`.
    pub fn login_link(&self, public_url: &str, email: &str, ttl: std::time::Duration) -> String {
        let token = sluice_console::login_link_token(&self.link_key, email, ttl);
        format!("{}/login/link?token={token}", public_url.trim_end_matches('/'))
    }
}

impl sluice_console::Sessions for ConsoleSessions {
    fn mint(&self, email: &str, ttl: std::time::Duration) -> anyhow::Result<String> {
        self.issuer.issue(email, Some(email), None, ttl)
    }

    fn link_key(&self) -> &[u8] {
        &self.link_key
    }
}

/// Runs CPU-bound work on tokio's blocking threads, at most a few jobs at
/// once (twice the cores): a flood of large gateway payloads waits its
/// turn instead of taking the threads that serve every other request.
pub struct BlockingPool {
    permits: Arc<tokio::sync::Semaphore>,
}

impl BlockingPool {
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Self { permits: Arc::new(tokio::sync::Semaphore::new(2 * cores)) }
    }
}

impl Default for BlockingPool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl sluice_domain::shared::offload::Offload for BlockingPool {
    async fn run(&self, job: Box<dyn FnOnce() + Send>) {
        let Ok(_permit) = self.permits.acquire().await else { return };
        if let Err(e) = tokio::task::spawn_blocking(job).await {
            tracing::error!(error = %e, "an offloaded job failed");
        }
    }
}

/// A bound, ready-to-run server.
pub struct Application {
    port: u16,
    server: actix_web::dev::Server,
    store: Store,
    _lock: Option<StoreLock>,
    /// Tells the worker to take no more runs.
    stop: tokio::sync::watch::Sender<bool>,
    /// The worker, when this process runs one.
    worker: Option<tokio::task::JoinHandle<()>>,
}

/// How long a stopping process waits for the run in progress to end; past
/// it the run is left to be resumed from its last checkpoint.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// How long the HTTP server keeps an idle connection open.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);

/// Once the worker was told to stop: its run in progress pauses at the
/// next checkpoint; a run with none inside gets [`SHUTDOWN_GRACE`].
async fn wait_for_worker(worker: tokio::task::JoinHandle<()>) {
    tracing::info!(grace_s = SHUTDOWN_GRACE.as_secs(), "stopping: the run in progress pauses at its next checkpoint");
    match tokio::time::timeout(SHUTDOWN_GRACE, worker).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => tracing::warn!("stopped with a run in progress; it resumes from its last checkpoint"),
    }
}

/// An exclusive lock on the embedded SQLite store, held while the process
/// runs: a second process on the same store would re-queue the first one's
/// live runs as orphans, so it refuses to start instead.
pub struct StoreLock(#[allow(dead_code)] std::fs::File);

impl StoreLock {
    /// Locks `<database file>.lock` beside the SQLite file.
    ///
    /// # Errors
    /// When another process holds the lock, or the file cannot be made.
    pub fn take(db_file: &std::path::Path) -> anyhow::Result<Self> {
        let mut name = db_file.as_os_str().to_owned();
        name.push(".lock");
        let path = std::path::PathBuf::from(name);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening the store lock {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Self(file)),
            Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
                "another sluice process is using the SQLite store {}; stop it first, or use PostgreSQL \
                 (SLUICE_DATABASE_URL=postgres://…) to run several processes",
                db_file.display()
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking the store lock {}", path.display()))
            }
        }
    }
}

impl Application {
    /// Connects the store (running migrations) and wires every port.
    async fn wire(
        settings: &mut Settings,
        metrics: Arc<sluice_http::metrics::Metrics>,
    ) -> anyhow::Result<(Sluice, Store)> {
        install_crypto_provider();
        let master_key = settings.ensure_secrets()?;
        let store = Store::connect(&settings.database_url, &master_key).await?;
        let metadata = sluice_connectors::MetadataStore {
            instance_id: Some(store.instance_id().await?),
            sqlite_file: settings.sqlite_file(),
        };
        let tokens = JwtVerifier::new(VerifierConfig {
            hs256_secret: settings.jwt_hs256_secret.as_ref().map(|s| s.expose().as_bytes().to_vec()),
            jwks: settings.jwt_jwks.as_deref().map(JwksSource::parse),
            issuer: settings.jwt_issuer.clone(),
            audience: settings.jwt_audience.clone(),
        })
        .await
        .context("setting up session-token verification")?;
        let shared = Arc::new(store.clone());
        let ports = Ports {
            users: shared.clone(),
            orgs: shared.clone(),
            invitations: shared.clone(),
            api_keys: shared.clone(),
            audit: shared.clone(),
            idempotency: shared.clone(),
            health: shared,
            tokens: Arc::new(tokens),
            clock: Arc::new(SystemClock),
            integrations: Arc::new(store.clone()),
            connections: Arc::new(store.clone()),
            catalog: Arc::new(store.clone()),
            schemas: Arc::new(store.clone()),
            billing: Arc::new(store.clone()),
            connectors: Arc::new(sluice_connectors::Registry::new(absolute(&settings.file_root)?).guarding(metadata)),
            secrets: Arc::new(sluice_clients::Secrets::new(settings.aws.clone())),
            oauth: (!settings.oauth.is_empty()).then(|| {
                Arc::new(sluice_clients::oauth::OAuthProviders::new(settings.oauth.clone(), &settings.public_url))
                    as Arc<dyn sluice_domain::connect::ports::OAuthClient>
            }),
            oauth_states: Some(Arc::new(store.clone())),
            // Derived from the master key, so states survive restarts and
            // are valid across processes sharing the key.
            oauth_state_key: sluice_domain::shared::secret::sha256_hex(
                &[&master_key[..], b"sluice oauth state"].concat(),
            )
            .into_bytes(),
            flows: Arc::new(store.clone()),
            runs: Arc::new(store.clone()),
            cursors: Arc::new(store.clone()),
            queue: Arc::new(store.clone()),
            verifications: Arc::new(store.clone()),
            stream_drops: Arc::new(store.clone()),
            activity: Arc::new(store.clone()),
            dashboard: Arc::new(store.clone()),
            rules: Arc::new(store.clone()),
            deliveries: Arc::new(store.clone()),
            webhooks: Arc::new(sluice_clients::webhooks::Webhooks::new(settings.webhook_allow_private)),
            iac: Arc::new(store.clone()),
        };
        let billing = match &settings.stripe {
            None => sluice_domain::billing::service::BillingConfig::default(),
            Some(st) => sluice_domain::billing::service::BillingConfig {
                provider: Some(Arc::new(sluice_clients::stripe::Stripe::new(&st.api_base, st.secret_key.clone()))),
                webhook_secret: st.webhook_secret.clone(),
                prices: sluice_domain::billing::provider::Prices {
                    pro: st.price_pro.clone(),
                    enterprise: st.price_enterprise.clone(),
                },
                public_url: settings.public_url.clone(),
            },
        };
        let options = sluice_domain::app::Options {
            lease: settings.run_lease,
            offload: Arc::new(BlockingPool::new()),
            billing,
            metrics,
            entity_concurrency: settings.entity_concurrency,
            read_ranges: settings.read_ranges,
            secret_policy: settings.secret_policy.clone(),
        };
        let sluice = Sluice::with_options(ports, options);
        Ok((sluice, store))
    }

    /// Connects the store (running migrations), wires the ports and binds the
    /// listener (`:0` picks a free port); starts a worker unless told not to.
    ///
    /// # Errors
    /// When the store, the JWKS or the listener cannot be set up.
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        // The port and the store's lock first: a process that cannot serve
        // must not touch the store (nor re-queue another process's runs).
        let listener = TcpListener::bind(&settings.listen).with_context(|| format!("binding {}", settings.listen))?;
        let lock = settings.sqlite_file().map(|f| StoreLock::take(&f)).transpose()?;
        let metrics = Arc::new(sluice_http::metrics::Metrics::default());
        let (sluice, store) = Self::wire(&mut settings, metrics.clone()).await?;
        if store.backend() == sluice_store::Backend::Sqlite {
            // The embedded store has one process: a run left running is
            // an orphan of a crash, to resume now rather than after a lease.
            let n = sluice.engine.recover_orphans().await?;
            if n > 0 {
                tracing::warn!(runs = n, "runs interrupted by a crash queued again");
            }
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        // Every serving process hears what others on the store change:
        // queued work, and credentials that its caches must drop.
        store.listen();
        tokio::spawn(worker::forget_changed_credentials(sluice.clone(), store.wake()));
        let worker = if settings.run_worker {
            let id = worker::worker_id();
            tokio::spawn(worker::deliver(sluice.clone(), id.clone(), store.wake()));
            tokio::spawn(worker::verify(sluice.clone(), id.clone(), stopped.clone(), store.wake()));
            Some(tokio::spawn(worker::run(sluice.clone(), id, stopped, store.wake())))
        } else {
            None
        };
        tokio::spawn(worker::schedule(sluice.clone()));
        let state = AppState {
            sluice,
            internal_api_key: settings.internal_api_key.clone(),
            console_url: settings.console_url.clone(),
            rate_limits: settings.rate_limits.map(|c| Arc::new(sluice_http::ratelimit::RateLimits::new(c))),
            metrics,
        };
        let console = sluice_console::ConsoleConfig {
            sessions: ConsoleSessions::from_settings(&settings)
                .map(|c| Arc::new(c) as Arc<dyn sluice_console::Sessions>),
            oidc: settings.oidc.clone().map(|c| {
                Arc::new(sluice_clients::oidc::Oidc::new(c, &settings.console_url))
                    as Arc<dyn sluice_domain::identity::ports::IdentityProvider>
            }),
        };
        let port = listener.local_addr()?.port();
        // Signals are ours (`run_until_stopped`): the HTTP workers' runtimes
        // must outlive the run in progress, whose pooled connections may
        // have been opened on them.
        // The API and, beside it, the console's pages.
        // An idle connection is kept 75 s (as nginx does), longer than the
        // 60 s a load balancer keeps its own by default: a peer that reuses
        // a connection the server has just closed sees its request fail
        // (actix's default of 5 s made that race common).
        let server = HttpServer::new(move || sluice_http::app(state.clone(), sluice_console::routes(console.clone())))
            .keep_alive(KEEP_ALIVE)
            .listen(listener)?
            .shutdown_timeout(10)
            .disable_signals()
            .run();
        tracing::info!(version = env!("CARGO_PKG_VERSION"), address = %settings.listen, port, backend = ?store.backend(), "sluice is serving");
        Ok(Self { port, server, store, _lock: lock, stop, worker })
    }

    /// A worker alone, without the HTTP API (`sluice worker`).
    ///
    /// # Errors
    /// When the store cannot be set up.
    pub async fn worker_only(mut settings: Settings) -> anyhow::Result<()> {
        let _lock = settings.sqlite_file().map(|f| StoreLock::take(&f)).transpose()?;
        // A worker alone serves no /metrics; its counters go nowhere.
        let (sluice, store) = Self::wire(&mut settings, Default::default()).await?;
        store.listen();
        tokio::spawn(worker::schedule(sluice.clone()));
        let id = worker::worker_id();
        tokio::spawn(worker::deliver(sluice.clone(), id.clone(), store.wake()));
        // Stops like `serve`: on SIGTERM or SIGINT, no more runs, and the
        // run in progress gets a bounded time to end.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(worker::verify(sluice.clone(), id.clone(), stopped.clone(), store.wake()));
        let mut worker = tokio::spawn(worker::run(sluice, id, stopped, store.wake()));
        tokio::select! {
            _ = &mut worker => return Ok(()),
            _ = shutdown_signal() => {}
        }
        let _ = stop.send(true);
        wait_for_worker(worker).await;
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves until SIGINT or SIGTERM.
    ///
    /// # Errors
    /// When the server fails.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        // SIGTERM or SIGINT: at once the worker takes no more runs and the
        // HTTP server takes no new connections; the run in progress gets a
        // bounded time to end; then the server finishes the requests in
        // flight and stops. Its worker threads (and their runtimes, on
        // which pooled connections of the metadata store and of connectors
        // were opened) stay up until the run has ended.
        let handle = self.server.handle();
        let mut server = tokio::spawn(self.server);
        let served = tokio::select! {
            served = &mut server => Some(served),
            _ = shutdown_signal() => None,
        };
        let _ = self.stop.send(true);
        if served.is_none() {
            handle.pause().await;
        }
        if let Some(worker) = self.worker {
            wait_for_worker(worker).await;
        }
        let served = match served {
            Some(s) => s,
            None => {
                handle.stop(true).await;
                server.await
            }
        };
        served.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }
}

/// Re-encrypts every stored credential with a new master key, in one
/// transaction. With the key in the data directory, a new one is generated
/// (unless given) and the file replaced after the database commits (the old
/// one kept as `master_key.previous`); with `SLUICE_MASTER_KEY`, the new key
/// must be given and the variable updated by the operator.
///
/// # Errors
/// When the database cannot be reached, a stored value does not decrypt
/// with the current key (nothing changes then), or the key file cannot be
/// written.
pub async fn rotate_master_key(mut settings: Settings, new_key: Option<&str>) -> anyhow::Result<u64> {
    let from_env = settings.master_key.is_some();
    let current = settings.ensure_secrets()?;
    let next = match new_key {
        Some(k) => settings::decode_master_key(k)?,
        None if from_env => {
            anyhow::bail!("the master key comes from SLUICE_MASTER_KEY: pass the new one with --new-key")
        }
        None => sluice_domain::shared::secret::random_bytes::<32>(),
    };
    if next == current {
        anyhow::bail!("the new master key is the current one");
    }
    let store = Store::connect(&settings.database_url, &current).await?;
    let n = store.rotate_master_key(&next).await?;
    if from_env {
        tracing::warn!(
            "credentials are now encrypted with the new key: set SLUICE_MASTER_KEY to it before starting sluice"
        );
    } else {
        settings::replace_master_key_file(&settings.data_dir, &next)?;
    }
    Ok(n)
}

/// The file root as an absolute path (created if missing), so connection
/// paths resolve the same whatever the working directory.
fn absolute(p: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(p).with_context(|| format!("creating the file root {}", p.display()))?;
    p.canonicalize().with_context(|| format!("resolving the file root {}", p.display()))
}

/// reqwest uses rustls with the ring provider, which must be installed once
/// per process.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::BlockingPool;
    use sluice_domain::shared::offload::Offload;

    /// The service's pool runs a job to its end before `run` returns, off
    /// the calling thread, and gives its permit back even when the job
    /// panics.
    #[tokio::test]
    async fn the_blocking_pool_runs_jobs_to_their_end_and_survives_a_panic() {
        let pool = BlockingPool::new();
        let all = pool.permits.available_permits();
        let here = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        pool.run(Box::new(move || tx.send(std::thread::current().id()).unwrap())).await;
        assert_ne!(rx.try_recv().expect("the job ran before run returned"), here);
        pool.run(Box::new(|| panic!("the job fails"))).await;
        assert_eq!(pool.permits.available_permits(), all);
    }
}
