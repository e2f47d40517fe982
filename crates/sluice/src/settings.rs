//! Settings: the one place that reads the environment. Defaults live here;
//! `Debug` never prints a secret.

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sluice_domain::shared::secret::{Secret, random_bytes};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://sluice.db?mode=rwc";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DATA_DIR: &str = "./.sluice";
const HS256_FILE: &str = "jwt_hs256_secret";
pub const DEFAULT_RUN_LEASE: std::time::Duration = std::time::Duration::from_secs(60);
const MASTER_KEY_FILE: &str = "master_key";

#[derive(Clone)]
pub struct Settings {
    pub database_url: String,
    pub listen: String,
    pub data_dir: PathBuf,
    pub jwt_hs256_secret: Option<Secret>,
    pub jwt_jwks: Option<String>,
    pub jwt_issuer: String,
    pub jwt_audience: String,
    pub internal_api_key: Option<Secret>,
    pub master_key: Option<Secret>,
    pub public_url: String,
    pub log_format: LogFormat,
    /// Where file and SQLite connections live; their paths resolve under it.
    pub file_root: PathBuf,
    /// AWS credentials for `aws:secretsmanager:` references (the standard
    /// `AWS_*` variables; `SLUICE_AWS_ENDPOINT` overrides the endpoint).
    pub aws: Option<sluice_clients::aws::AwsConfig>,
    /// OAuth providers by lowercase name (`SLUICE_OAUTH_<PROVIDER>_*`).
    pub oauth: std::collections::BTreeMap<String, sluice_clients::oauth::ProviderConfig>,
    /// Where the OAuth callback sends the browser at the end
    /// (`SLUICE_CONSOLE_URL`, default the public URL).
    pub console_url: String,
    /// Whether this process executes runs (`serve --no-worker` turns it off).
    pub run_worker: bool,
    /// How long a worker holds a run without a heartbeat before another
    /// process takes it over (`SLUICE_RUN_LEASE`, seconds, default 60,
    /// at least 3); workers renew it six times within.
    pub run_lease: std::time::Duration,
    /// How many of a run's entities sync at once
    /// (`SLUICE_ENTITY_CONCURRENCY`, 1 to 64, default 4); a SQLite
    /// destination takes one at a time whatever this says.
    pub entity_concurrency: usize,
    /// Into how many key ranges, read at once, a full refresh of a large
    /// PostgreSQL or MySQL table is split (`SLUICE_READ_RANGES`, 1 to 16,
    /// default 2; 1 reads each table in one piece).
    pub read_ranges: usize,
    /// Per-client rate limits (`SLUICE_RATE_LIMITS=off` switches them off;
    /// `SLUICE_RATE_LIMIT_CLIENT`, `_ANONYMOUS`, `_FAILED_AUTH` take
    /// `<per second>[:<burst>]`).
    pub rate_limits: Option<sluice_http::ratelimit::RateLimitConfig>,
    /// The payment provider (`SLUICE_STRIPE_*`); `None` without a secret key.
    pub stripe: Option<StripeSettings>,
    /// Notification deliveries may reach loopback, private and link-local
    /// addresses (`SLUICE_WEBHOOK_ALLOW_PRIVATE`, default false).
    pub webhook_allow_private: bool,
    /// Console sign-in with OpenID Connect (`SLUICE_OIDC_ISSUER`,
    /// `SLUICE_OIDC_CLIENT_ID`, `SLUICE_OIDC_CLIENT_SECRET`).
    pub oidc: Option<sluice_clients::oidc::OidcConfig>,
    /// The secret references organizations may resolve
    /// (`SLUICE_ENV_REFS_ALLOW`, `SLUICE_AWS_SECRETS_ALLOW`; by default
    /// none; see `docs/security.md`).
    pub secret_policy: sluice_domain::connect::secret_policy::SecretPolicy,
}

/// Stripe: the secret key, the webhook signing secret, the API base (tests
/// point it at a fake) and the price ids of the paid plans.
#[derive(Clone)]
pub struct StripeSettings {
    pub secret_key: Secret,
    pub webhook_secret: Option<Secret>,
    pub api_base: String,
    pub price_pro: Option<String>,
    pub price_enterprise: Option<String>,
}

impl std::fmt::Debug for StripeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeSettings")
            .field("secret_key", &self.secret_key)
            .field("webhook_secret", &self.webhook_secret)
            .field("api_base", &self.api_base)
            .field("price_pro", &self.price_pro)
            .field("price_enterprise", &self.price_enterprise)
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl Settings {
    /// The metadata store's SQLite file, when the store is SQLite on a file.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        let rest = self.database_url.strip_prefix("sqlite:")?;
        let path = rest.trim_start_matches("//").split('?').next().unwrap_or_default();
        (!path.is_empty() && !path.starts_with(":memory:")).then(|| PathBuf::from(path))
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &sluice_store::redact_url(&self.database_url))
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("jwt_hs256_secret", &self.jwt_hs256_secret)
            .field("jwt_jwks", &self.jwt_jwks)
            .field("jwt_issuer", &self.jwt_issuer)
            .field("jwt_audience", &self.jwt_audience)
            .field("internal_api_key", &self.internal_api_key)
            .field("master_key", &self.master_key)
            .field("public_url", &self.public_url)
            .field("file_root", &self.file_root)
            .field("aws", &self.aws)
            .field("oauth", &self.oauth)
            .field("console_url", &self.console_url)
            .field("stripe", &self.stripe)
            .field("webhook_allow_private", &self.webhook_allow_private)
            .finish()
    }
}

impl Settings {
    /// Reads `SLUICE_*` variables.
    ///
    /// # Errors
    /// When a variable holds an invalid value.
    #[allow(clippy::disallowed_methods)] // this is the one place that reads the environment
    pub fn from_env() -> anyhow::Result<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let listen = var("SLUICE_LISTEN").unwrap_or_else(|| DEFAULT_LISTEN.into());
        let log_format = match var("SLUICE_LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => bail!("SLUICE_LOG_FORMAT must be 'text' or 'json', not '{other}'"),
        };
        let data_dir = PathBuf::from(var("SLUICE_DATA_DIR").unwrap_or_else(|| DEFAULT_DATA_DIR.into()));
        let aws = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key_id), Some(secret_access_key)) => Some(sluice_clients::aws::AwsConfig {
                access_key_id,
                secret_access_key,
                session_token: var("AWS_SESSION_TOKEN"),
                region: var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")).unwrap_or_else(|| "us-east-1".into()),
                endpoint: var("SLUICE_AWS_ENDPOINT"),
            }),
            _ => None,
        };
        let public_url = var("SLUICE_PUBLIC_URL").unwrap_or_else(|| format!("http://{listen}"));
        let run_lease = match var("SLUICE_RUN_LEASE") {
            None => DEFAULT_RUN_LEASE,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n >= 3 => std::time::Duration::from_secs(n),
                _ => bail!("SLUICE_RUN_LEASE must be a whole number of seconds, at least 3, not '{v}'"),
            },
        };
        let entity_concurrency = match var("SLUICE_ENTITY_CONCURRENCY") {
            None => sluice_domain::sync::engine::run::DEFAULT_ENTITY_CONCURRENCY,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=64).contains(&n) => n,
                _ => bail!("SLUICE_ENTITY_CONCURRENCY must be a whole number from 1 to 64, not '{v}'"),
            },
        };
        let read_ranges = match var("SLUICE_READ_RANGES") {
            None => sluice_domain::sync::engine::entity::DEFAULT_READ_RANGES,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=16).contains(&n) => n,
                _ => bail!("SLUICE_READ_RANGES must be a whole number from 1 to 16, not '{v}'"),
            },
        };
        let rate_limits = match var("SLUICE_RATE_LIMITS").as_deref().map(str::trim) {
            Some("off" | "false" | "0") => None,
            None | Some("on" | "true" | "1") => {
                let mut c = sluice_http::ratelimit::RateLimitConfig::default();
                for (key, limit) in [
                    ("SLUICE_RATE_LIMIT_CLIENT", &mut c.client),
                    ("SLUICE_RATE_LIMIT_ANONYMOUS", &mut c.anonymous),
                    ("SLUICE_RATE_LIMIT_FAILED_AUTH", &mut c.failed_auth),
                ] {
                    if let Some(v) = var(key) {
                        *limit = sluice_http::ratelimit::Limit::parse(&v).map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
                    }
                }
                Some(c)
            }
            Some(other) => bail!("SLUICE_RATE_LIMITS must be 'on' or 'off', not '{other}'"),
        };
        let stripe = var("SLUICE_STRIPE_SECRET_KEY").map(|key| StripeSettings {
            secret_key: Secret::new(key),
            webhook_secret: var("SLUICE_STRIPE_WEBHOOK_SECRET").map(Secret::new),
            api_base: var("SLUICE_STRIPE_API_BASE").unwrap_or_else(|| sluice_clients::stripe::DEFAULT_BASE.into()),
            price_pro: var("SLUICE_STRIPE_PRICE_PRO"),
            price_enterprise: var("SLUICE_STRIPE_PRICE_ENTERPRISE"),
        });
        let webhook_allow_private = match var("SLUICE_WEBHOOK_ALLOW_PRIVATE").as_deref().map(str::trim) {
            None | Some("false" | "0" | "off") => false,
            Some("true" | "1" | "on") => true,
            Some(other) => bail!("SLUICE_WEBHOOK_ALLOW_PRIVATE must be true or false, not '{other}'"),
        };
        let oidc = match (var("SLUICE_OIDC_ISSUER"), var("SLUICE_OIDC_CLIENT_ID"), var("SLUICE_OIDC_CLIENT_SECRET")) {
            (None, None, None) => None,
            (Some(issuer), Some(client_id), Some(secret)) => {
                let c = sluice_clients::oidc::OidcConfig { issuer, client_id, client_secret: Secret::new(secret) };
                c.check().map_err(|e| anyhow::anyhow!(e))?;
                Some(c)
            }
            _ => bail!("set all of SLUICE_OIDC_ISSUER, SLUICE_OIDC_CLIENT_ID and SLUICE_OIDC_CLIENT_SECRET, or none"),
        };
        let secret_policy = sluice_domain::connect::secret_policy::SecretPolicy::parse(
            &var("SLUICE_ENV_REFS_ALLOW").unwrap_or_default(),
            &var("SLUICE_AWS_SECRETS_ALLOW").unwrap_or_default(),
        )
        .map_err(anyhow::Error::msg)?;
        Ok(Self {
            secret_policy,
            oidc,
            webhook_allow_private,
            stripe,
            run_lease,
            entity_concurrency,
            read_ranges,
            rate_limits,
            aws,
            oauth: oauth_providers(&var)?,
            console_url: var("SLUICE_CONSOLE_URL").unwrap_or_else(|| public_url.clone()),
            run_worker: true,
            file_root: var("SLUICE_FILE_ROOT").map(PathBuf::from).unwrap_or_else(|| data_dir.join("files")),
            database_url: var("SLUICE_DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.into()),
            public_url,
            listen,
            data_dir,
            jwt_hs256_secret: var("SLUICE_JWT_HS256_SECRET").map(Secret::new),
            jwt_jwks: var("SLUICE_JWT_JWKS"),
            jwt_issuer: var("SLUICE_JWT_ISSUER").unwrap_or_else(|| "sluice".into()),
            jwt_audience: var("SLUICE_JWT_AUDIENCE").unwrap_or_else(|| "sluice".into()),
            internal_api_key: var("SLUICE_INTERNAL_API_KEY").map(Secret::new),
            master_key: var("SLUICE_MASTER_KEY").map(Secret::new),
            log_format,
        })
    }

    /// Fills the HS256 secret and the master key from the data directory,
    /// generating them there (mode 0600) on first start. Logs where they
    /// are, never their values. Answers the master key's 32 bytes.
    ///
    /// # Errors
    /// When the data directory cannot be written or a stored key is invalid.
    pub fn ensure_secrets(&mut self) -> anyhow::Result<[u8; 32]> {
        if self.jwt_hs256_secret.is_none() {
            let path = self.data_dir.join(HS256_FILE);
            self.jwt_hs256_secret = Some(load_or_generate(&path, "HS256 session-token secret")?);
        }
        if self.master_key.is_none() {
            let path = self.data_dir.join(MASTER_KEY_FILE);
            self.master_key = Some(load_or_generate(&path, "master key")?);
        }
        let k = self.master_key.as_ref().context("a master key is configured or generated")?;
        decode_master_key(k.expose())
    }
}

/// Replaces the master key file in `data_dir` with `key`, keeping the old
/// one as `master_key.previous` (both mode 0600).
///
/// # Errors
/// When the files cannot be written.
pub fn replace_master_key_file(data_dir: &Path, key: &[u8; 32]) -> anyhow::Result<()> {
    let path = data_dir.join(MASTER_KEY_FILE);
    let previous = data_dir.join(format!("{MASTER_KEY_FILE}.previous"));
    let tmp = data_dir.join(format!(".{MASTER_KEY_FILE}.tmp"));
    let _ = fs::remove_file(&tmp);
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(B64.encode(key).as_bytes())?;
    f.sync_all()?;
    if path.exists() {
        fs::rename(&path, &previous).with_context(|| format!("keeping the old key as {}", previous.display()))?;
    }
    fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(path = %path.display(), previous = %previous.display(), "master key replaced");
    Ok(())
}

/// A master key in base64, decoded to its 32 bytes.
///
/// # Errors
/// When it is not base64 of exactly 32 bytes.
pub fn decode_master_key(b64: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = B64.decode(b64.trim()).context("a master key must be base64")?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| anyhow::anyhow!("a master key must decode to 32 bytes, not {}", bytes.len()))
}

fn load_or_generate(path: &Path, what: &str) -> anyhow::Result<Secret> {
    if path.exists() {
        let value = fs::read_to_string(path).with_context(|| format!("reading the {what} at {}", path.display()))?;
        check_permissions(path);
        return Ok(Secret::new(value.trim().to_string()));
    }
    let dir = path.parent().context("secret path has a parent")?;
    fs::create_dir_all(dir).with_context(|| format!("creating the data directory {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).ok();
    }
    let value = B64.encode(random_bytes::<32>());
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(value.as_bytes())?;
    f.sync_all()?;
    tracing::info!(path = %path.display(), "generated a new {what}; keep this file private and backed up");
    Ok(Secret::new(value))
}

fn check_permissions(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = fs::metadata(path)
            && m.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(path = %path.display(), "secret file is readable by others; run chmod 600 on it");
        }
    }
}

/// Providers from `SLUICE_OAUTH_<PROVIDER>_{CLIENT_ID,CLIENT_SECRET,AUTH_URL,TOKEN_URL}`
/// and optional `_SCOPES`; a provider missing one of the four is an error.
fn oauth_providers(
    var: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<std::collections::BTreeMap<String, sluice_clients::oauth::ProviderConfig>> {
    let mut names: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| {
            k.strip_prefix("SLUICE_OAUTH_").and_then(|r| r.strip_suffix("_CLIENT_ID")).map(str::to_string)
        })
        .collect();
    names.sort();
    let mut out = std::collections::BTreeMap::new();
    for n in names {
        let get = |suffix: &str| {
            var(&format!("SLUICE_OAUTH_{n}_{suffix}")).with_context(|| format!("SLUICE_OAUTH_{n}_{suffix} is required"))
        };
        out.insert(
            n.to_ascii_lowercase(),
            sluice_clients::oauth::ProviderConfig {
                client_id: get("CLIENT_ID")?,
                client_secret: Secret::new(get("CLIENT_SECRET")?),
                auth_url: get("AUTH_URL")?,
                token_url: get("TOKEN_URL")?,
                scopes: var(&format!("SLUICE_OAUTH_{n}_SCOPES")),
            },
        );
    }
    Ok(out)
}

/// `1h`, `30m`, `45s`, `7d` or plain seconds.
pub fn parse_ttl(s: &str) -> anyhow::Result<std::time::Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().with_context(|| format!("invalid duration '{s}'"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => bail!("invalid duration '{s}': use s, m, h or d"),
    };
    if secs == 0 {
        bail!("the duration must be positive");
    }
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_parse_in_every_unit() {
        assert_eq!(parse_ttl("1h").unwrap().as_secs(), 3600);
        assert_eq!(parse_ttl("30m").unwrap().as_secs(), 1800);
        assert_eq!(parse_ttl("90").unwrap().as_secs(), 90);
        assert_eq!(parse_ttl("7d").unwrap().as_secs(), 604_800);
        assert!(parse_ttl("0").is_err());
        assert!(parse_ttl("1y").is_err());
        assert!(parse_ttl("h").is_err());
    }

    #[test]
    fn secrets_are_generated_once_with_private_permissions() {
        let dir = std::env::temp_dir().join(format!("sluice-settings-{}", uuid_like()));
        let mut s = Settings {
            database_url: DEFAULT_DATABASE_URL.into(),
            listen: DEFAULT_LISTEN.into(),
            data_dir: dir.clone(),
            jwt_hs256_secret: None,
            jwt_jwks: None,
            jwt_issuer: "sluice".into(),
            jwt_audience: "sluice".into(),
            internal_api_key: None,
            master_key: None,
            public_url: String::new(),
            log_format: LogFormat::Text,
            file_root: dir.join("files"),
            aws: None,
            oauth: Default::default(),
            console_url: String::new(),
            run_worker: false,
            run_lease: DEFAULT_RUN_LEASE,
            entity_concurrency: sluice_domain::sync::engine::run::DEFAULT_ENTITY_CONCURRENCY,
            read_ranges: sluice_domain::sync::engine::entity::DEFAULT_READ_RANGES,
            rate_limits: Some(Default::default()),
            stripe: None,
            webhook_allow_private: false,
            oidc: None,
            secret_policy: Default::default(),
        };
        s.ensure_secrets().unwrap();
        let first = s.jwt_hs256_secret.clone().unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.join(HS256_FILE)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let mode = fs::metadata(dir.join(MASTER_KEY_FILE)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        s.jwt_hs256_secret = None;
        s.master_key = None;
        s.ensure_secrets().unwrap();
        assert_eq!(s.jwt_hs256_secret.clone().unwrap(), first, "a second start reads the same secret");
        assert!(
            !format!("{:?}", Settings { jwt_hs256_secret: Some(first.clone()), ..s.clone() }).contains(first.expose())
        );
        fs::remove_dir_all(dir).unwrap();
    }

    fn uuid_like() -> String {
        sluice_domain::shared::secret::random_base62(12)
    }
}
