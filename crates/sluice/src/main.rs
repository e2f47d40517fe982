//! The `sluice` command.

use anyhow::Context;
use clap::{Parser, Subcommand};
use sluice::settings::{Settings, parse_ttl};
use sluice::{Application, telemetry};

#[derive(Parser)]
#[command(name = "sluice", version, about = "Self-hosted data movement and governance")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API and execute runs (the default).
    Serve {
        /// Serve the API only; runs are executed by `sluice worker` processes.
        #[arg(long)]
        no_worker: bool,
    },
    /// Execute queued runs only, without the HTTP API.
    Worker,
    /// Print an HS256 session token signed with the configured secret.
    Token {
        /// The user's e-mail address; it also identifies the user (`sub`).
        #[arg(long)]
        email: String,
        /// The user's display name.
        #[arg(long)]
        name: Option<String>,
        /// Lifetime: 30m, 1h, 7d or seconds.
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
    /// Print a one-time link that signs the user into the web console
    /// (uses SLUICE_PUBLIC_URL for the link's address, and the HS256 secret
    /// from SLUICE_JWT_HS256_SECRET or the data directory).
    LoginLink {
        /// The user's e-mail address.
        #[arg(long)]
        email: String,
        /// How long the link stays usable: 15m, 1h or seconds (24h at most).
        #[arg(long, default_value = "15m")]
        ttl: String,
    },
    /// Apply an IaC document to an organization (uses SLUICE_URL and
    /// SLUICE_API_KEY); prints the plan and exits non-zero on errors.
    Apply {
        /// The YAML document; `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// The organization's id.
        #[arg(long)]
        org: String,
        /// Plan only: show what would change and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print an organization's configuration as an IaC document that
    /// applies back unchanged (secrets as ***).
    Export {
        /// The organization's id.
        #[arg(long)]
        org: String,
    },
    /// List the organizations the API key sees (uses SLUICE_URL and
    /// SLUICE_API_KEY): id, slug, plan, name.
    Orgs,
    /// Run a flow now (uses SLUICE_URL and SLUICE_API_KEY); with --follow,
    /// print its log until it ends and exit non-zero unless it succeeded.
    Run {
        /// The flow's id or name.
        flow: String,
        /// The organization's id.
        #[arg(long)]
        org: String,
        /// Follow the run to its end.
        #[arg(long)]
        follow: bool,
    },
    /// Print a run's log (uses SLUICE_URL and SLUICE_API_KEY); with
    /// --follow, until the run ends.
    Logs {
        /// The run's id.
        run: String,
        /// The organization's id.
        #[arg(long)]
        org: String,
        /// Keep printing new lines until the run ends.
        #[arg(long)]
        follow: bool,
    },
    /// Re-encrypt every stored credential with a new master key. Stop the
    /// servers first; start them with the new key afterwards.
    RotateMasterKey {
        /// The new key (base64 of 32 bytes). Required when the current key
        /// comes from SLUICE_MASTER_KEY; otherwise one is generated and the
        /// key file in the data directory is replaced.
        #[arg(long)]
        new_key: Option<String>,
    },
}

// A multi-threaded runtime: a run's reader (its own task) decodes the next
// batch while the writer encodes the last one, on another core. The HTTP
// server's workers keep their own single-threaded runtimes either way.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One clear line (the causes joined), no debug dump.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `--email` as the domain accepts it, or its problem in one line.
fn checked_email(email: &str) -> anyhow::Result<String> {
    sluice_domain::identity::user::validate_email("--email", email).map_err(|e| match e {
        sluice_domain::Error::Validation(f) => {
            anyhow::anyhow!("{}", f.iter().map(|x| format!("{} {}", x.field, x.message)).collect::<Vec<_>>().join("; "))
        }
        other => anyhow::anyhow!("{other}"),
    })
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut settings = Settings::from_env()?;
    telemetry::init(settings.log_format);
    match cli.command.unwrap_or(Command::Serve { no_worker: false }) {
        Command::Serve { no_worker } => {
            settings.run_worker = !no_worker;
            let app = Application::build(settings).await?;
            app.run_until_stopped().await?;
        }
        Command::Worker => Application::worker_only(settings).await?,
        Command::Token { email, name, ttl } => {
            let email = checked_email(&email)?;
            let ttl = parse_ttl(&ttl)?;
            settings.ensure_secrets()?;
            let secret = settings.jwt_hs256_secret.as_ref().map(|s| s.expose().as_bytes().to_vec()).unwrap_or_default();
            let issuer = sluice_auth::TokenIssuer::new(secret, settings.jwt_issuer, settings.jwt_audience);
            println!("{}", issuer.issue(&email, Some(&email), name.as_deref(), ttl)?);
        }
        Command::LoginLink { email, ttl } => {
            let email = checked_email(&email)?;
            let ttl = parse_ttl(&ttl)?;
            // A spent link is remembered as long as idempotency keys are:
            // no link may outlive that.
            let most = sluice_domain::shared::idempotency::RETENTION.unsigned_abs();
            if ttl > most {
                anyhow::bail!("--ttl is at most {} hours for a login link", most.as_secs() / 3600);
            }
            settings.ensure_secrets()?;
            let sessions = sluice::ConsoleSessions::from_settings(&settings).context("no HS256 secret")?;
            println!("{}", sessions.login_link(&settings.public_url, &email, ttl));
        }
        Command::Apply { file, org, dry_run } => {
            let target = sluice::client::Target::from_env()?;
            let document = if file == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the document from standard input")?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?
            };
            let answer = sluice::client::apply(&target, &org, document, dry_run).await?;
            println!("{}", sluice::client::render_plan(&answer));
        }
        Command::Export { org } => {
            let target = sluice::client::Target::from_env()?;
            print!("{}", sluice::client::export(&target, &org).await?);
        }
        Command::Orgs => {
            let target = sluice::client::Target::from_env()?;
            print!("{}", sluice::client::orgs(&target).await?);
        }
        Command::Run { flow, org, follow } => {
            let target = sluice::client::Target::from_env()?;
            let queued = sluice::client::run(&target, &org, &flow).await?;
            let id = queued["id"].as_str().unwrap_or_default().to_string();
            eprintln!("run {id} queued");
            if follow {
                let ended = sluice::client::logs(&target, &org, &id, true).await?;
                let summary = sluice::client::run_summary(&ended);
                if ended["status"] != "succeeded" {
                    anyhow::bail!("{summary}");
                }
                eprintln!("{summary}");
            } else {
                println!("{id}");
            }
        }
        Command::Logs { run, org, follow } => {
            let target = sluice::client::Target::from_env()?;
            let r = sluice::client::logs(&target, &org, &run, follow).await?;
            if follow {
                eprintln!("{}", sluice::client::run_summary(&r));
            }
        }
        Command::RotateMasterKey { new_key } => {
            let n = sluice::rotate_master_key(settings, new_key.as_deref()).await?;
            eprintln!("re-encrypted {n} stored credential set(s) with the new master key");
        }
    }
    Ok(())
}
