//! The governance mask, one rule for the transform step `mask` and the
//! gateway's sensitive fields.

/// The governance mask: the first 3 characters (1 when the value has 6 or
/// fewer) and `****`; an e-mail address keeps its domain
/// (`john@example.com` → `j****@example.com`).
pub fn mask(s: &str) -> String {
    if let Some((local, domain)) = s.split_once('@')
        && !local.is_empty()
        && domain.contains('.')
    {
        return format!("{}****@{domain}", keep(local));
    }
    format!("{}****", keep(s))
}

/// The leading part of `text` that stays visible: its first 3 characters
/// when it has more than 6, its first 1 when it has 3 to 6, none when it is
/// shorter (so a short name is never shown whole). Characters are Unicode
/// scalar values.
fn keep(text: &str) -> String {
    let n = match text.chars().count() {
        7.. => 3,
        3..=6 => 1,
        _ => 0,
    };
    text.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_keeps_a_short_prefix_and_an_email_domain() {
        assert_eq!(mask("john@example.com"), "j****@example.com");
        assert_eq!(mask("4111111111111111"), "411****");
        assert_eq!(mask("secret"), "s****");
        assert_eq!(mask(""), "****");
        // The contract's table.
        for (given, want) in [
            ("123456789", "123****"),
            ("12345", "1****"),
            ("ab", "****"),
            ("abc", "a****"),
            ("abcdefg", "abc****"),
            ("support@saddledata.com", "sup****@saddledata.com"),
            ("john@example.com", "j****@example.com"),
            ("ann@example.com", "a****@example.com"),
            ("jo@example.com", "****@example.com"),
            ("josé@example.com", "j****@example.com"),
            ("żółwiczek", "żół****"),
        ] {
            assert_eq!(mask(given), want, "{given}");
        }
    }
}
