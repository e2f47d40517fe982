//! SQL text alike across engines: quoted identifiers, the `SELECT` of a
//! read, and deletes and updates by key.

use sluice_domain::connect::connector::{
    ConnectorError, ConnectorResult, EntitySchema, Field, KeyRange, KeyedRead, ReadRequest, Value,
};

/// `"name"` with inner quotes doubled (PostgreSQL, SQLite).
pub fn quote_dq(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `` `name` `` with inner backticks doubled (MySQL).
pub fn quote_bt(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The query of a read: `SELECT cols FROM table`, with the cursor bound
/// (`>=` a placeholder) and ordering when the request has a cursor, and its
/// limit. Answers the SQL and the cursor value to bind, if any.
///
/// # Errors
/// `InvalidConfig` when the cursor field is not in the entity.
pub fn select_sql(
    schema: &EntitySchema,
    cols: &[String],
    table: &str,
    req: &ReadRequest,
    quote: fn(&str) -> String,
    placeholder: impl Fn(&Field) -> String,
) -> ConnectorResult<(String, Option<Value>)> {
    let mut sql = format!("SELECT {} FROM {table}", cols.join(", "));
    let mut bound = None;
    if let Some(c) = &req.cursor {
        let f = schema.field(&c.field).ok_or_else(|| {
            ConnectorError::InvalidConfig(format!("cursor field '{}' is not in {}", c.field, schema.name))
        })?;
        if let Some(from) = &c.from {
            sql.push_str(&format!(" WHERE {} >= {}", quote(&c.field), placeholder(f)));
            bound = Some(from.clone());
        }
        sql.push_str(&format!(" ORDER BY {}", quote(&c.field)));
    }
    if let Some(l) = req.limit {
        sql.push_str(&format!(" LIMIT {l}"));
    }
    Ok((sql, bound))
}

/// `DELETE FROM table WHERE (k, …) IN (…)` for `rows` keys, each `(?, …)`,
/// the list opened by `list` (`"VALUES "` for SQLite, nothing for MySQL);
/// names quoted already.
pub fn delete_by_keys_sql(table: &str, keys: &[String], rows: usize, list: &str) -> String {
    let tuple = format!("({})", vec!["?"; keys.len()].join(", "));
    format!("DELETE FROM {table} WHERE ({}) IN ({list}{})", keys.join(", "), vec![tuple.as_str(); rows].join(", "))
}

/// `UPDATE table SET a = ?, … WHERE k = ? AND …` (the set values first);
/// names quoted already.
pub fn update_by_key_sql(table: &str, set: &[String], keys: &[String]) -> String {
    let assign: Vec<String> = set.iter().map(|n| format!("{n} = ?")).collect();
    let at: Vec<String> = keys.iter().map(|n| format!("{n} = ?")).collect();
    format!("UPDATE {table} SET {} WHERE {}", assign.join(", "), at.join(" AND "))
}

/// The fields of an update's rows split into those set and the key
/// (`key`: the table's key fields), by index.
pub fn set_and_key(fields: &[Field], key: &[String]) -> (Vec<usize>, Vec<usize>) {
    (0..fields.len()).partition(|i| !key.contains(&fields[*i].name))
}

/// The condition of the rows whose key is in `range` (none when it takes
/// every key): `(k1, k2) > (a1, a2) AND (k1, k2) <= (b1, b2)`. `column`
/// writes a key column as compared (text by its bytes: a binary
/// collation), `value` one bound (a placeholder it binds, or a literal).
pub fn key_range_sql(
    range: &KeyRange,
    column: impl Fn(&Field) -> String,
    mut value: impl FnMut(&Field, &Value) -> String,
) -> Option<String> {
    let cols: Vec<String> = range.fields.iter().map(&column).collect();
    let mut parts = Vec::new();
    for (bound, op) in [(&range.after, ">"), (&range.upto, "<=")] {
        if let Some(values) = bound {
            let vals: Vec<String> = range.fields.iter().zip(values).map(|(f, v)| value(f, v)).collect();
            parts.push(format!("({}) {op} ({})", cols.join(", "), vals.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

/// The statement of a keyed read (see `Source::read_keyed`): every
/// column in `cols`, the rows of the read's range (key columns written by
/// `ordered`, as compared: text by its bytes) or of its `only` keys (key
/// columns by `plain`, so that an index serves the lookup), ordered by
/// `ordered`. `value` writes one value (a placeholder it binds, or a
/// literal). `values_list`: the list of keys is a `VALUES` list (SQLite
/// takes row values from no other). `nulls_first`: the engine sorts nulls
/// last unless told (PostgreSQL).
#[allow(clippy::too_many_arguments)] // the engines differ in each
pub fn keyed_select_sql(
    read: &KeyedRead,
    cols: &[String],
    table: &str,
    ordered: impl Fn(&Field) -> String,
    plain: impl Fn(&Field) -> String,
    mut value: impl FnMut(&Field, &Value) -> String,
    values_list: bool,
    nulls_first: bool,
) -> String {
    let fields = &read.range.fields;
    let condition = match &read.only {
        Some(keys) if keys.is_empty() => Some("1 = 0".to_string()),
        Some(keys) => {
            let tuples: Vec<String> = keys
                .iter()
                .map(|k| format!("({})", fields.iter().zip(k).map(|(f, v)| value(f, v)).collect::<Vec<_>>().join(", ")))
                .collect();
            let list = if values_list { format!("VALUES {}", tuples.join(", ")) } else { tuples.join(", ") };
            let key: Vec<String> = fields.iter().map(&plain).collect();
            Some(format!("({}) IN ({list})", key.join(", ")))
        }
        None => key_range_sql(&read.range, &ordered, &mut value),
    };
    let last = if nulls_first { " NULLS FIRST" } else { "" };
    let order: Vec<String> = fields.iter().map(|f| format!("{}{last}", ordered(f))).collect();
    format!(
        "SELECT {} FROM {table}{} ORDER BY {}",
        cols.join(", "),
        condition.map(|c| format!(" WHERE {c}")).unwrap_or_default(),
        order.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_safely() {
        assert_eq!(quote_dq("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_bt("a`b"), "`a``b`");
    }
}
