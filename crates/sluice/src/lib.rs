//! The Sluice application: settings, telemetry and the wiring of adapters to
//! the domain's ports. `main.rs` is a thin CLI over this, and the end-to-end
//! tests build the same [`Application`].

pub mod settings;
pub mod telemetry;

use actix_web::HttpServer;
use anyhow::Context;
use settings::Settings;
use sluice_auth::{JwksSource, JwtVerifier, VerifierConfig};
use sluice_domain::clock::SystemClock;
use sluice_domain::service::{Ports, Sluice};
use sluice_http::AppState;
use sluice_store::Store;
use std::net::TcpListener;
use std::sync::Arc;

/// A bound, ready-to-run server.
pub struct Application {
    port: u16,
    server: actix_web::dev::Server,
    store: Store,
}

impl Application {
    /// Connects the store (running migrations), wires the ports and binds the
    /// listener (`:0` picks a free port).
    ///
    /// # Errors
    /// When the store, the JWKS or the listener cannot be set up.
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        install_crypto_provider();
        let master_key = settings.ensure_secrets()?;
        let store = Store::connect(&settings.database_url, &master_key).await?;
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
            connectors: Arc::new(sluice_connectors::Registry::new(absolute(&settings.file_root)?)),
            secrets: Arc::new(sluice_clients::Secrets),
        };
        let state = AppState { sluice: Sluice::new(ports), internal_api_key: settings.internal_api_key.clone() };
        let listener = TcpListener::bind(&settings.listen).with_context(|| format!("binding {}", settings.listen))?;
        let port = listener.local_addr()?.port();
        let server =
            HttpServer::new(move || sluice_http::app(state.clone())).listen(listener)?.shutdown_timeout(10).run();
        tracing::info!(address = %settings.listen, port, backend = ?store.backend(), "sluice is serving");
        Ok(Self { port, server, store })
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
        self.server.await
    }
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
