//! The Parquet writer's files read back by an independent reader: DuckDB
//! 1.5.5 from PyPI (the lake readers' venv `.ci/run` makes), which must see
//! each type as Parquet's logical type and every value as written.

use sluice_connectors::parquet::{Codec, ParquetFile, ROW_GROUP_ROWS};
use sluice_domain::connect::connector::{EntitySchema, Field, FieldType, Value};
use sluice_testkit::services::lake_python;
use std::process::Command;

fn field(name: &str, t: FieldType, native: Option<&str>, nullable: bool) -> Field {
    let mut f = Field::new(name, t);
    f.native_type = native.map(str::to_string);
    f.nullable = nullable;
    f.primary_key = name == "id";
    f
}

fn schema() -> EntitySchema {
    EntitySchema {
        name: "all_types".into(),
        fields: vec![
            field("id", FieldType::Integer, None, false),
            field("x", FieldType::Number, None, true),
            field("price", FieldType::Decimal, Some("postgres:numeric(12,2)"), true),
            field("big", FieldType::Decimal, Some("postgres:numeric(30,4)"), true),
            field("loose", FieldType::Decimal, Some("postgres:numeric"), true),
            field("ok", FieldType::Boolean, None, true),
            field("at", FieldType::Timestamp, None, true),
            field("day", FieldType::Date, None, true),
            field("note", FieldType::String, None, true),
            field("doc", FieldType::Object, None, true),
            field("raw", FieldType::Binary, None, true),
        ],
    }
}

/// Row `i`: every fifth one null where it may be.
fn row(i: i64) -> Vec<Value> {
    if i % 5 == 4 {
        let mut r = vec![Value::Int(i)];
        r.extend(std::iter::repeat_n(Value::Null, 10));
        return r;
    }
    let at = time::OffsetDateTime::from_unix_timestamp(1_767_225_600 + i).unwrap()
        + time::Duration::microseconds(i % 1_000_000);
    vec![
        Value::Int(i),
        Value::Float(i as f64 / 4.0),
        Value::Decimal(format!("{}.{:02}", i - 500, i % 100)),
        Value::Decimal(format!("-12345678901234567890123456.{:04}", i % 10_000)),
        Value::Decimal(format!("{i}.000000000001")),
        Value::Bool(i % 2 == 0),
        Value::Timestamp(at),
        Value::Date(time::Date::from_julian_day(2_461_042 + (i % 400) as i32).unwrap()),
        Value::String(format!("n° {i} ✓")),
        Value::Json(serde_json::json!({"i": i, "tags": ["a", i % 3]})),
        Value::Bytes(vec![0, 255, (i % 256) as u8]),
    ]
}

const READ: &str = r#"
import json, sys, duckdb
path = sys.argv[1]
c = duckdb.connect()
types = {r[0]: r[1] for r in c.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()}
rows = c.execute(f"""SELECT id, x, price::VARCHAR, big::VARCHAR, loose, ok,
    strftime("at"::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%fZ'), "day"::VARCHAR, note, doc::VARCHAR, hex(raw)
    FROM read_parquet('{path}') ORDER BY id""").fetchall()
groups = c.execute(f"SELECT count(DISTINCT row_group_id) FROM parquet_metadata('{path}')").fetchone()[0]
print(json.dumps({"types": types, "rows": rows, "groups": groups}, default=str))
"#;

#[test]
fn duckdb_reads_back_every_type_as_written_across_row_groups() {
    let Some(python) = lake_python() else { return };
    let n = ROW_GROUP_ROWS as i64 + 1_000;
    let dir = std::env::temp_dir().join(format!("sluice-parquet-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("all_types.parquet");
    let schema = schema();
    for codec in [Codec::Zstd, Codec::Snappy, Codec::None] {
        let mut file = ParquetFile::new(std::fs::File::create(&path).unwrap(), &schema, codec).unwrap();
        let rows: Vec<Vec<Value>> = (0..n).map(row).collect();
        for chunk in rows.chunks(10_000) {
            file.write(chunk).unwrap();
        }
        let (_, written) = file.finish().unwrap();
        assert_eq!(written, n as u64);
        let out = Command::new(&python).arg("-c").arg(READ).arg(&path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let types = &got["types"];
        let want = [
            ("id", "BIGINT"),
            ("x", "DOUBLE"),
            ("price", "DECIMAL(12,2)"),
            ("big", "DECIMAL(30,4)"),
            ("loose", "VARCHAR"),
            ("ok", "BOOLEAN"),
            ("at", "TIMESTAMP WITH TIME ZONE"),
            ("day", "DATE"),
            ("note", "VARCHAR"),
            ("doc", "JSON"),
            ("raw", "BLOB"),
        ];
        for (name, t) in want {
            assert_eq!(types[name], t, "{codec:?}: {name} reads as {}", types[name]);
        }
        assert_eq!(got["groups"], 2, "{codec:?}: the rows span two row groups");
        let rows = got["rows"].as_array().unwrap();
        assert_eq!(rows.len(), n as usize);
        for i in [0, 1, 4, 99, 1234, n - 1] {
            let r = &rows[i as usize];
            let expect = row(i);
            assert_eq!(r[0], i);
            if i % 5 == 4 {
                assert!(r.as_array().unwrap()[1..].iter().all(|v| v.is_null()), "{codec:?}: row {i}: {r}");
                continue;
            }
            assert_eq!(r[1], i as f64 / 4.0);
            let Value::Decimal(price) = &expect[2] else { unreachable!() };
            assert_eq!(r[2].as_str().unwrap(), price.as_str(), "{codec:?}: row {i}");
            assert_eq!(r[3].as_str().unwrap(), format!("-12345678901234567890123456.{:04}", i % 10_000));
            assert_eq!(r[4].as_str().unwrap(), format!("{i}.000000000001"));
            assert_eq!(r[5], i % 2 == 0);
            let Value::Timestamp(at) = &expect[6] else { unreachable!() };
            let text = at.format(&time::format_description::well_known::Rfc3339).unwrap();
            let micros = format!("{:06}", at.microsecond());
            assert_eq!(r[6].as_str().unwrap(), format!("{}.{micros}Z", &text[..19]), "{codec:?}: row {i}");
            let Value::Date(d) = &expect[7] else { unreachable!() };
            assert_eq!(r[7].as_str().unwrap(), d.to_string());
            assert_eq!(r[8].as_str().unwrap(), format!("n° {i} ✓"));
            let doc: serde_json::Value = serde_json::from_str(r[9].as_str().unwrap()).unwrap();
            assert_eq!(doc, serde_json::json!({"i": i, "tags": ["a", i % 3]}));
            assert_eq!(r[10].as_str().unwrap(), format!("00FF{:02X}", i % 256));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_value_its_column_cannot_hold_is_refused_whole() {
    let mut schema = schema();
    schema.fields.truncate(3);
    let mut file = ParquetFile::new(Vec::new(), &schema, Codec::Zstd).unwrap();
    file.write(&[vec![Value::Int(1), Value::Float(1.0), Value::Decimal("1.25".into())]]).unwrap();
    let refused = file.write(&[vec![Value::Int(2), Value::Float(2.0), Value::Decimal("1.255".into())]]);
    assert!(refused.unwrap_err().to_string().contains("price"));
    let null_key = file.write(&[vec![Value::Null, Value::Null, Value::Null]]);
    assert!(null_key.unwrap_err().to_string().contains("id"));
    assert_eq!(file.rows(), 1, "nothing of a refused row is taken");
    let (bytes, rows) = file.finish().unwrap();
    assert_eq!((rows, &bytes[..4]), (1, &b"PAR1"[..]));
}
