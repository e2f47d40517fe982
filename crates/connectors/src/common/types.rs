//! Types across engines: native types tagged with their engine, what a
//! widening is, the decimal and time zone details one engine passes to
//! another, and stored text read as a value of a field type.

use sluice_domain::connect::connector::{Field, FieldType, Value};
use sluice_domain::shared::record::{parse_date, parse_timestamp};

/// Native types are tagged with their engine (`postgres:numeric(12,2)`), so
/// a destination reuses only its own engine's types.
pub fn native_tag(engine: &str, native: &str) -> String {
    format!("{engine}:{native}")
}

pub fn native_for<'a>(field: &'a Field, engine: &str) -> Option<&'a str> {
    field.native_type.as_deref().and_then(|n| n.strip_prefix(engine)).and_then(|n| n.strip_prefix(':'))
}

/// A column type's family and size, for telling a widening apart.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Width {
    /// Bytes of an integer.
    Int(u8),
    /// Bytes of a float.
    Float(u8),
    /// Characters of a string (`u32::MAX`: unbounded).
    Text(u32),
    /// Digits before and after the point (`u32::MAX`: unbounded).
    Decimal(u32, u32),
}

fn width(native: &str) -> Option<Width> {
    let n = native.trim().to_ascii_lowercase();
    let n = n.strip_suffix(" unsigned").unwrap_or(&n);
    // MySQL's display width (`int(11)`) is no size.
    let base = n.split('(').next().unwrap_or(n).trim();
    if let Some(bytes) = [("tinyint", 1), ("smallint", 2), ("mediumint", 3), ("int", 4), ("integer", 4), ("bigint", 8)]
        .iter()
        .find(|(name, _)| *name == base)
        .map(|(_, b)| *b)
    {
        return Some(Width::Int(bytes));
    }
    let args = |prefix: &str| -> Option<Vec<u32>> {
        let inner = n.strip_prefix(prefix)?.strip_prefix('(')?.strip_suffix(')')?;
        inner.split(',').map(|a| a.trim().parse().ok()).collect()
    };
    Some(match n {
        "tinyint" => Width::Int(1),
        "smallint" | "int2" => Width::Int(2),
        "mediumint" => Width::Int(3),
        "integer" | "int" | "int4" => Width::Int(4),
        "bigint" | "int8" => Width::Int(8),
        "real" | "float4" | "float" => Width::Float(4),
        "double precision" | "float8" | "double" => Width::Float(8),
        "text" | "mediumtext" | "longtext" | "character varying" | "varchar" => Width::Text(u32::MAX),
        "numeric" | "decimal" => Width::Decimal(u32::MAX, u32::MAX),
        _ => {
            if let Some(a) = args("character varying").or_else(|| args("varchar")) {
                Width::Text(*a.first()?)
            } else if let Some(a) = args("numeric").or_else(|| args("decimal")) {
                let (p, s) = (*a.first()?, a.get(1).copied().unwrap_or(0));
                Width::Decimal(p.checked_sub(s)?, s)
            } else {
                return None;
            }
        }
    })
}

/// Whether a column of type `have` becomes `want` by widening alone (a
/// larger integer, float or string, a decimal with more digits on both
/// sides of the point): every value it holds fits, so the column can be
/// altered in place. Another type, or a narrower one, is not a widening.
pub fn widens(have: &str, want: &str) -> bool {
    let (Some(h), Some(w)) = (width(have), width(want)) else { return false };
    match (h, w) {
        (Width::Int(a), Width::Int(b)) | (Width::Float(a), Width::Float(b)) => b > a,
        (Width::Text(a), Width::Text(b)) => b > a,
        (Width::Decimal(ai, af), Width::Decimal(bi, bf)) => bi >= ai && bf >= af && (bi, bf) != (ai, af),
        _ => false,
    }
}

/// The precision and scale a decimal field's source declared, whatever
/// its engine (`numeric(12,2)`, `decimal(12,2)`), so an exact column keeps
/// them across engines.
pub fn decimal_args(f: &Field) -> Option<(u32, u32)> {
    let native = f.native_type.as_deref()?.split_once(':')?.1.to_ascii_lowercase();
    let args = native.strip_prefix("numeric(").or_else(|| native.strip_prefix("decimal("))?;
    let (p, s) = args.split_once(')')?.0.split_once(',').unwrap_or((args.split_once(')')?.0, "0"));
    let (p, s) = (p.trim().parse().ok()?, s.trim().parse().ok()?);
    (p > 0 && s <= p).then_some((p, s))
}

/// Whether a timestamp field's source type holds no time zone
/// (PostgreSQL `timestamp without time zone`, MySQL `datetime`), so a
/// destination that has such a type keeps it.
pub fn zoneless(f: &Field) -> bool {
    let Some((engine, native)) = f.native_type.as_deref().and_then(|n| n.split_once(':')) else { return false };
    let n = native.to_ascii_lowercase();
    match engine {
        "postgres" => n.starts_with("timestamp") && !n.contains("with time zone"),
        "mysql" => n.starts_with("datetime"),
        _ => false,
    }
}

/// The column comment marking a JSON column that holds arrays, in engines
/// whose JSON type does not say.
pub const ARRAY_COMMENT: &str = "sluice:array";

/// Interprets stored text as a value of type `t`; text that does not parse
/// stays a string rather than being lost.
pub fn text_value(s: String, t: FieldType) -> Value {
    match t {
        FieldType::Integer => s.trim().parse().map(Value::Int).unwrap_or(Value::String(s)),
        FieldType::Number => s.trim().parse().map(Value::Float).unwrap_or(Value::String(s)),
        FieldType::Decimal => Value::Decimal(s),
        FieldType::Boolean => {
            let word = s.trim();
            let is = |words: [&str; 3]| words.iter().any(|w| word.eq_ignore_ascii_case(w));
            if is(["1", "true", "t"]) {
                Value::Bool(true)
            } else if is(["0", "false", "f"]) {
                Value::Bool(false)
            } else {
                Value::String(s)
            }
        }
        FieldType::Timestamp => parse_timestamp(&s).map(Value::Timestamp).unwrap_or(Value::String(s)),
        FieldType::Date => parse_date(&s).map(Value::Date).unwrap_or(Value::String(s)),
        FieldType::Object | FieldType::Array => Value::json_text(s),
        FieldType::Binary => Value::Bytes(s.into_bytes()),
        FieldType::String => Value::String(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_are_read_from_text_whatever_their_case() {
        for (text, want) in [
            ("1", Value::Bool(true)),
            (" TRUE ", Value::Bool(true)),
            ("t", Value::Bool(true)),
            ("True", Value::Bool(true)),
            ("0", Value::Bool(false)),
            ("False", Value::Bool(false)),
            (" F", Value::Bool(false)),
            ("yes", Value::String("yes".into())),
            ("", Value::String("".into())),
            ("truee", Value::String("truee".into())),
        ] {
            assert_eq!(text_value(text.into(), FieldType::Boolean), want, "{text:?}");
        }
    }

    #[test]
    fn widenings_are_told_from_other_changes() {
        for (have, want) in [
            ("integer", "bigint"),
            ("smallint", "integer"),
            ("int", "bigint"),
            ("real", "double precision"),
            ("character varying(20)", "character varying(200)"),
            ("character varying(20)", "text"),
            ("varchar(20)", "varchar(21)"),
            ("numeric(12,2)", "numeric(14,2)"),
            ("numeric(12,2)", "numeric(13,3)"),
            ("numeric(12,2)", "numeric"),
            ("decimal(10,0)", "decimal(12,0)"),
            ("int(11)", "bigint(20)"),
            ("int", "bigint unsigned"),
        ] {
            assert!(widens(have, want), "{have} -> {want}");
        }
        for (have, want) in [
            ("bigint", "integer"),
            ("integer", "integer"),
            ("text", "character varying(20)"),
            ("numeric(12,2)", "numeric(12,3)"),
            ("numeric(12,2)", "numeric(11,2)"),
            ("integer", "text"),
            ("integer", "numeric(12,2)"),
            ("timestamp", "timestamptz"),
            ("varchar(x)", "text"),
        ] {
            assert!(!widens(have, want), "{have} -> {want}");
        }
    }

    #[test]
    fn decimal_precision_and_zones_cross_engines() {
        let tagged = |t, n: &str| {
            let mut f = Field::new("x", t);
            f.native_type = Some(n.to_string());
            f
        };
        use sluice_domain::connect::connector::FieldType::*;
        assert_eq!(decimal_args(&tagged(Decimal, "mysql:decimal(12,2)")), Some((12, 2)));
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric(10,0)")), Some((10, 0)));
        assert_eq!(decimal_args(&tagged(Decimal, "mysql:decimal(12)")), Some((12, 0)));
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric")), None);
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric(2,5)")), None);
        assert!(zoneless(&tagged(Timestamp, "postgres:timestamp without time zone")));
        assert!(zoneless(&tagged(Timestamp, "postgres:timestamp(3) without time zone")));
        assert!(!zoneless(&tagged(Timestamp, "postgres:timestamp with time zone")));
        assert!(zoneless(&tagged(Timestamp, "mysql:datetime(6)")));
        assert!(!zoneless(&tagged(Timestamp, "mysql:timestamp")));
        assert!(!zoneless(&Field::new("x", Timestamp)));
    }

    #[test]
    fn native_types_are_used_only_by_their_engine() {
        let mut f = Field::new("x", sluice_domain::connect::connector::FieldType::Decimal);
        f.native_type = Some(native_tag("postgres", "numeric(12,2)"));
        assert_eq!(native_for(&f, "postgres"), Some("numeric(12,2)"));
        assert_eq!(native_for(&f, "mysql"), None);
        assert_eq!(native_for(&f, "post"), None);
    }
}
