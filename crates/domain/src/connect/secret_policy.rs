//! Which secret references an organization may resolve.
//!
//! A credential value may be a reference resolved when it is used:
//! `env:NAME` from the service's environment, `aws:secretsmanager:ARN` with
//! the service's AWS identity. Both read what belongs to the operator, not
//! to a tenant, so a tenant reaches only what the operator granted it:
//!
//! - nothing by default;
//! - `env:` names matching a grant of `SLUICE_ENV_REFS_ALLOW`, never a name
//!   of the service's own configuration (`SLUICE_*`, and `AWS_*`, the
//!   service's own AWS identity), whatever the grants say;
//! - `aws:secretsmanager:` references matching a grant of
//!   `SLUICE_AWS_SECRETS_ALLOW`.
//!
//! A grant is `PATTERN` (every organization) or `ORG_ID=PATTERN` (that
//! organization only), grants separated by commas or white space; `*` in a
//! pattern matches any run of characters. See `docs/security.md`.

use crate::FieldError;
use crate::connect::integration::{Credentials, SecretValue};
use crate::shared::ids::OrgId;

/// Environment names that configure the service itself: never resolved.
const RESERVED_ENV_PREFIXES: [&str; 2] = ["SLUICE_", "AWS_"];

/// One operator grant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    org: Option<OrgId>,
    pattern: String,
}

impl Grant {
    fn covers(&self, org: OrgId, name: &str) -> bool {
        self.org.is_none_or(|o| o == org) && glob(&self.pattern, name)
    }
}

/// The operator's grants of secret references to organizations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretPolicy {
    env: Vec<Grant>,
    aws: Vec<Grant>,
}

/// Why a reference may not be resolved for an organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl SecretPolicy {
    /// The policy from the two settings' texts (empty: nothing granted).
    ///
    /// # Errors
    /// A message naming the setting and the grant that does not parse.
    pub fn parse(env_grants: &str, aws_grants: &str) -> Result<Self, String> {
        let env = parse_grants("SLUICE_ENV_REFS_ALLOW", env_grants, |p| {
            p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'*')
        })?;
        let aws = parse_grants("SLUICE_AWS_SECRETS_ALLOW", aws_grants, |_| true)?;
        Ok(SecretPolicy { env, aws })
    }

    /// Whether `org` may resolve the credential value `value` (a plain
    /// secret always may).
    ///
    /// # Errors
    /// [`Refused`], naming the reference (a reference is a name, never a
    /// secret) and what would grant it.
    pub fn check(&self, org: OrgId, value: &str) -> Result<(), Refused> {
        match SecretValue::parse(value) {
            SecretValue::Plain(_) => Ok(()),
            SecretValue::Env(name) => {
                if RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) {
                    return Err(Refused(format!(
                        "the secret reference env:{name} names the service's own configuration \
                         ({}*), which is never resolved for an organization",
                        RESERVED_ENV_PREFIXES.join("*, ")
                    )));
                }
                if self.env.iter().any(|g| g.covers(org, name)) {
                    Ok(())
                } else {
                    Err(Refused(format!(
                        "the secret reference env:{name} is not granted to this organization \
                         (the operator grants environment names with SLUICE_ENV_REFS_ALLOW)"
                    )))
                }
            }
            SecretValue::AwsSecretsManager(arn) => {
                if self.aws.iter().any(|g| g.covers(org, arn)) {
                    Ok(())
                } else {
                    Err(Refused(format!(
                        "the secret reference aws:secretsmanager:{arn} is not granted to this organization \
                         (the operator grants secrets with SLUICE_AWS_SECRETS_ALLOW)"
                    )))
                }
            }
        }
    }
}

impl SecretPolicy {
    /// The values that this write sets in `after` (new, or changed from
    /// `before`) which `org` may not resolve, as errors on
    /// `field.<key>`. A value already stored is checked when it is used.
    pub fn refused_in(&self, org: OrgId, field: &str, after: &Credentials, before: &Credentials) -> Vec<FieldError> {
        after
            .0
            .iter()
            .filter(|(k, v)| before.0.get(*k) != Some(*v))
            .filter_map(|(k, v)| self.check(org, v).err().map(|r| FieldError::new(format!("{field}.{k}"), r.0)))
            .collect()
    }
}

fn parse_grants(setting: &str, text: &str, valid: impl Fn(&str) -> bool) -> Result<Vec<Grant>, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|g| !g.is_empty())
        .map(|g| {
            let (org, pattern) = match g.split_once('=') {
                Some((o, p)) => {
                    let org = o
                        .parse::<uuid::Uuid>()
                        .map_err(|_| format!("{setting}: '{o}' in the grant '{g}' is not an organization id"))?;
                    (Some(OrgId::from(org)), p)
                }
                None => (None, g),
            };
            if pattern.is_empty() || !valid(pattern) {
                return Err(format!("{setting}: '{pattern}' in the grant '{g}' is not a pattern"));
            }
            Ok(Grant { org, pattern: pattern.to_string() })
        })
        .collect()
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (linear backtracking on the last star: O(len × len) at worst).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(n: u128) -> OrgId {
        OrgId::from(uuid::Uuid::from_u128(n))
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let p = SecretPolicy::default();
        assert_eq!(p.check(org(1), "plain secret"), Ok(()));
        let e = p.check(org(1), "env:WAREHOUSE_PASSWORD").unwrap_err().0;
        assert!(e.contains("env:WAREHOUSE_PASSWORD") && e.contains("SLUICE_ENV_REFS_ALLOW"), "{e}");
        let e = p.check(org(1), "aws:secretsmanager:prod/db").unwrap_err().0;
        assert!(e.contains("aws:secretsmanager:prod/db") && e.contains("SLUICE_AWS_SECRETS_ALLOW"), "{e}");
    }

    #[test]
    fn grants_cover_every_organization_or_one() {
        let acme = org(7);
        let text = format!("WAREHOUSE_*, PG_PASSWORD {}=ACME_*", uuid::Uuid::from_u128(7));
        let p = SecretPolicy::parse(&text, "").unwrap();
        assert_eq!(p.check(org(1), "env:WAREHOUSE_PW"), Ok(()));
        assert_eq!(p.check(org(1), "env:PG_PASSWORD"), Ok(()));
        assert!(p.check(org(1), "env:PG_PASSWORD_2").is_err(), "a pattern matches the whole name");
        assert!(p.check(org(1), "env:ACME_PW").is_err(), "another organization's grant");
        assert_eq!(p.check(acme, "env:ACME_PW"), Ok(()));
    }

    #[test]
    fn the_services_own_configuration_is_never_resolved() {
        let p = SecretPolicy::parse("*", "").unwrap();
        assert_eq!(p.check(org(1), "env:ANYTHING"), Ok(()));
        for name in ["SLUICE_JWT_HS256_SECRET", "SLUICE_MASTER_KEY", "SLUICE_DATABASE_URL", "AWS_SECRET_ACCESS_KEY"] {
            let e = p.check(org(1), &format!("env:{name}")).unwrap_err().0;
            assert!(e.contains(name) && e.contains("own configuration"), "{e}");
        }
    }

    #[test]
    fn aws_secrets_are_granted_by_arn_or_name_pattern() {
        let acme = uuid::Uuid::from_u128(7);
        let text = format!("{acme}=arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme/*");
        let p = SecretPolicy::parse("", &text).unwrap();
        let arn = "aws:secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme/db-AbC#password";
        assert_eq!(p.check(org(7), arn), Ok(()));
        assert!(p.check(org(8), arn).is_err());
        assert!(
            p.check(org(7), "aws:secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:other").is_err()
        );
    }

    #[test]
    fn malformed_grants_are_named() {
        let e = SecretPolicy::parse("not-a-uuid=PG_*", "").unwrap_err();
        assert!(e.contains("SLUICE_ENV_REFS_ALLOW") && e.contains("not-a-uuid"), "{e}");
        let e = SecretPolicy::parse("PG-PASSWORD", "").unwrap_err();
        assert!(e.contains("PG-PASSWORD"), "{e}");
        assert_eq!(SecretPolicy::parse(" , ", ""), Ok(SecretPolicy::default()));
    }

    #[test]
    fn glob_matches_stars_anywhere() {
        assert!(glob("*", ""));
        assert!(glob("A*B*C", "AxxBxxC"));
        assert!(!glob("A*B*C", "AxxBxx"));
        assert!(glob("*_PW", "X_PW"));
        assert!(!glob("X", "XY"));
        assert!(glob("a*a*a*a*b", &format!("{}b", "a".repeat(200))));
        assert!(!glob("a*a*a*a*b", &"a".repeat(200)));
    }
}
