//! The few PostgreSQL functions that clients call on connecting, so that they connect:
//! SQLAlchemy's dialects ask `pg_catalog.version()` (and read the major version from it) and
//! `pg_catalog.current_schema()`; Grafana's PostgreSQL data source asks
//! `current_setting('server_version_num')`. The answers describe Lockstep's PostgreSQL
//! listener (`src/pg.rs`), which speaks PostgreSQL 16's protocol and answers `SHOW
//! server_version` with the same version.
//!
//! - `version()`, `pg_catalog.version()`: `PostgreSQL 16.6 (Lockstep x.y.z) on Apache DataFusion
//!   55.y.z` (tools detect the server by the unqualified `version()` too; DataFusion's own
//!   answer, its version and platform, did not start with `PostgreSQL`);
//! - `current_schema()`, `pg_catalog.current_schema()`: `public`, where the tables are;
//! - `current_database()`, `pg_catalog.current_database()`: `lockstep` (the listener takes any
//!   database name);
//! - `current_setting(name)`: `server_version`, `server_version_num`, `server_encoding`,
//!   `client_encoding`, `TimeZone`, `DateStyle`, `standard_conforming_strings`,
//!   `integer_datetimes`; any other name is an error naming it.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::prelude::SessionContext;

/// The PostgreSQL version the listener gives (`SHOW server_version`).
pub const SERVER_VERSION: &str = "16.6";

/// `server_version_num` of [`SERVER_VERSION`].
const SERVER_VERSION_NUM: &str = "160006";

/// The settings `current_setting` answers, with their values.
fn setting(name: &str) -> Option<String> {
    let value = match name.to_ascii_lowercase().as_str() {
        "server_version" => format!("{SERVER_VERSION} (Lockstep {})", env!("CARGO_PKG_VERSION")),
        "server_version_num" => SERVER_VERSION_NUM.into(),
        "server_encoding" | "client_encoding" => "UTF8".into(),
        "timezone" => "UTC".into(),
        "datestyle" => "ISO, MDY".into(),
        "standard_conforming_strings" | "integer_datetimes" => "on".into(),
        _ => return None,
    };
    Some(value)
}

/// Registers the functions of the module docs on `ctx`.
pub(crate) fn register(ctx: &SessionContext) {
    let version = format!(
        "PostgreSQL {SERVER_VERSION} (Lockstep {}) on Apache DataFusion {}",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    );
    let constants = [
        ("version", version.clone()),
        ("pg_catalog.version", version),
        ("current_schema", "public".into()),
        ("pg_catalog.current_schema", "public".into()),
        ("current_database", "lockstep".into()),
        ("pg_catalog.current_database", "lockstep".into()),
    ];
    for (name, value) in constants {
        ctx.register_udf(ScalarUDF::new_from_impl(Constant {
            name,
            value,
            signature: Signature::nullary(Volatility::Stable),
        }));
    }
    for name in ["current_setting", "pg_catalog.current_setting"] {
        ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting {
            name,
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
        }));
    }
}

/// A function of no arguments that returns a fixed text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    value: String,
    signature: Signature,
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(self.value.clone()))))
    }
}

/// `current_setting(name)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [DataType::Utf8] => Ok(DataType::Utf8),
            other => plan_err!("current_setting takes one text argument, got {other:?}"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value = |name: Option<&str>| -> Result<Option<String>> {
            match name {
                None => Ok(None),
                Some(name) => match setting(name) {
                    Some(v) => Ok(Some(v)),
                    None => exec_err!("current_setting: unrecognized configuration parameter \"{name}\""),
                },
            }
        };
        match &args.args[..] {
            [ColumnarValue::Scalar(ScalarValue::Utf8(name))] => {
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(value(name.as_deref())?)))
            }
            [ColumnarValue::Array(names)] => {
                let names = names.as_string::<i32>();
                let values = (0..names.len())
                    .map(|i| value(names.is_valid(i).then(|| names.value(i))))
                    .collect::<Result<StringArray>>()?;
                Ok(ColumnarValue::Array(Arc::new(values) as ArrayRef))
            }
            other => exec_err!("current_setting takes one text argument, got {}", other.len()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use arrow::array::AsArray;

    /// The answers clients read on connecting, per row for `current_setting`, and an unknown
    /// setting named in the error.
    #[tokio::test]
    async fn clients_probes_are_answered() {
        let ctx = datafusion::prelude::SessionContext::new();
        super::register(&ctx);
        let text = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let batches = ctx.sql(sql).await?.collect().await?;
                let column = batches[0].column(0);
                let column = arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8)?;
                Ok::<_, datafusion::error::DataFusionError>(
                    (0..column.len()).map(|i| column.as_string::<i32>().value(i).to_string()).collect::<Vec<_>>(),
                )
            }
        };
        let version = text("SELECT pg_catalog.version()").await.unwrap();
        assert!(version[0].starts_with("PostgreSQL 16.6 (Lockstep "), "{version:?}");
        assert_eq!(text("SELECT version()").await.unwrap(), version, "the unqualified name too");
        assert_eq!(text("SELECT pg_catalog.current_schema()").await.unwrap(), ["public"]);
        assert_eq!(text("SELECT current_database()").await.unwrap(), ["lockstep"]);
        assert_eq!(text("SELECT CAST(current_setting('server_version_num') AS INT) / 100").await.unwrap(), ["1600"]);
        let per_row = "SELECT current_setting(n) FROM (VALUES ('TimeZone'), ('standard_conforming_strings')) t(n)";
        assert_eq!(text(per_row).await.unwrap(), ["UTC", "on"]);
        let e = text("SELECT current_setting('work_mem')").await.unwrap_err().to_string();
        assert!(e.contains("unrecognized configuration parameter \"work_mem\""), "{e}");
    }
}
