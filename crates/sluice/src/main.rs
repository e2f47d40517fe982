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

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
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
            let email = sluice_domain::identity::user::validate_email("--email", &email)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let ttl = parse_ttl(&ttl)?;
            settings.ensure_secrets()?;
            let secret = settings.jwt_hs256_secret.as_ref().map(|s| s.expose().as_bytes().to_vec()).unwrap_or_default();
            let issuer = sluice_auth::TokenIssuer::new(secret, settings.jwt_issuer, settings.jwt_audience);
            println!("{}", issuer.issue(&email, Some(&email), name.as_deref(), ttl)?);
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
        Command::RotateMasterKey { new_key } => {
            let n = sluice::rotate_master_key(settings, new_key.as_deref()).await?;
            eprintln!("re-encrypted {n} stored credential set(s) with the new master key");
        }
    }
    Ok(())
}
