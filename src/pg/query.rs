//! Statements of the PostgreSQL listener: classification (queries, and the transaction and
//! session statements drivers send), planning in a fresh Lockstep session, parameters, the
//! Arrow → Postgres encoding (timestamps as `timestamptz`) and the statement limits.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use futures::{Sink, SinkExt, StreamExt};
use lockstep_query::QueryError;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::DataRow;

use super::session::{Session, Settings, parse as parse_session};
use super::{CancelFlag, Handlers, Shared};
use crate::netsql::{Guarded, wire_schema};
use lockstep_query::script::code_start;

/// The time zone timestamps without one are sent in.
pub(super) const UTC: &str = "+00:00";

/// What a statement is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// SQL for the Lockstep session.
    Query,
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK` or `ABORT` (the tag).
    End(&'static str),
    /// A session statement accepted without effect (the tag).
    Ignored(&'static str),
    /// A PostgreSQL feature the listener does not have (what it is called), refused with
    /// SQLSTATE 0A000.
    Unsupported(&'static str),
    /// `SHOW` of a PostgreSQL run-time parameter: its name as shown and its value.
    Show(&'static str, &'static str),
    /// `SET`, `RESET`, `DISCARD ALL`, or `SHOW` of a parameter the session sets.
    Session(Session),
}

/// The PostgreSQL parameters `SHOW` answers as PostgreSQL does (one column named after the
/// parameter): what drivers and tools ask on connecting. The values are fixed: the session is
/// read-only, in UTC, with PostgreSQL's defaults otherwise.
const SHOWN: [(&str, &str); 11] = [
    ("TimeZone", "UTC"),
    ("server_version", concat!("16.6 (Lockstep ", env!("CARGO_PKG_VERSION"), ")")),
    ("server_encoding", "UTF8"),
    ("client_encoding", "UTF8"),
    ("DateStyle", "ISO, MDY"),
    ("IntervalStyle", "postgres"),
    ("integer_datetimes", "on"),
    ("standard_conforming_strings", "on"),
    ("transaction_isolation", "read committed"),
    ("default_transaction_read_only", "on"),
    ("transaction_read_only", "on"),
];

/// `SHOW name` (`SHOW TIME ZONE` and `SHOW TRANSACTION ISOLATION LEVEL`, SQLAlchemy's, too)
/// for a parameter of [`SHOWN`], case-insensitively.
fn shown(sql: &str) -> Option<Kind> {
    let words: Vec<String> =
        sql.trim().trim_end_matches(';').split_whitespace().map(|w| w.trim_matches('"').to_ascii_lowercase()).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let name = match words.as_slice() {
        ["show", name] => name,
        ["show", "time", "zone"] => "timezone",
        ["show", "transaction", "isolation", "level"] => "transaction_isolation",
        _ => return None,
    };
    SHOWN.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|&(n, v)| Kind::Show(n, v))
}

fn classify(sql: &str) -> Kind {
    let start = code_start(sql);
    let mut words = start.split(|c: char| !c.is_ascii_alphabetic());
    let word = words.next().unwrap_or("").to_ascii_lowercase();
    match word.as_str() {
        "begin" | "start" => Kind::Begin,
        "commit" | "end" => Kind::End("COMMIT"),
        "rollback" | "abort" => Kind::End("ROLLBACK"),
        "set" | "reset" | "discard" => parse_session(start).map_or_else(
            // `DISCARD PLANS`, `SEQUENCES`, `TEMP`: nothing to discard, the tag as PostgreSQL's.
            || match words.find(|w| !w.is_empty()).unwrap_or("").to_ascii_lowercase().as_str() {
                "plans" => Kind::Ignored("DISCARD PLANS"),
                "sequences" => Kind::Ignored("DISCARD SEQUENCES"),
                "temp" | "temporary" => Kind::Ignored("DISCARD TEMP"),
                _ => Kind::Ignored("DISCARD ALL"),
            },
            Kind::Session,
        ),
        "deallocate" => Kind::Ignored("DEALLOCATE"),
        // A pool's reset (`DISCARD ALL`'s companion) is harmless; a LISTEN would wait forever.
        "unlisten" => Kind::Ignored("UNLISTEN"),
        "listen" | "notify" => Kind::Unsupported("LISTEN and NOTIFY"),
        "show" => parse_session(start).map(Kind::Session).or_else(|| shown(start)).unwrap_or(Kind::Query),
        _ => Kind::Query,
    }
}

/// The one-column, one-row result of a `SHOW`.
fn show_batch(name: &str, value: &str) -> PgWireResult<RecordBatch> {
    let schema =
        Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(name, DataType::Utf8, false)]));
    let column: arrow::array::ArrayRef = Arc::new(arrow::array::StringArray::from(vec![value]));
    RecordBatch::try_new(schema, vec![column]).map_err(|e| internal(e.to_string()))
}

/// A parsed statement: its SQL, kind, and for queries the result schema (as sent: timestamps
/// with a zone) and parameter types found by planning it.
#[derive(Debug, Clone)]
pub struct Statement {
    sql: String,
    kind: Kind,
    schema: Option<SchemaRef>,
    parameters: Vec<Option<DataType>>,
}

/// Plans statements at `Parse` so that `Describe` can answer with the result's columns.
#[derive(Debug)]
pub struct Parser {
    pub(super) shared: Arc<Shared>,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Statement;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let kind = classify(sql);
        let (mut schema, mut parameters) = (None, Vec::new());
        if let Kind::Show(name, _) | Kind::Session(Session::Show(name)) = kind {
            schema = Some(show_batch(name, "")?.schema());
        }
        if kind == Kind::Query {
            let engine = self.shared.engine().map_err(|e| user_error(&e))?;
            let frame = engine.sql(sql).await.map_err(|e| user_error(&e))?;
            let types = frame.logical_plan().get_parameter_types().map_err(|e| user_error(&e.into()))?;
            // `$1` … `$n` up to the highest used (a statement of `$1` and `$3` takes three).
            let highest = types.keys().filter_map(|k| k.strip_prefix('$')?.parse::<usize>().ok()).max().unwrap_or(0);
            let lists = super::params::list_parameters(frame.logical_plan());
            parameters = (1..=highest)
                .map(|i| {
                    let id = format!("${i}");
                    types.get(&id).cloned().flatten().or_else(|| lists.get(&id).cloned())
                })
                .collect();
            schema = Some(Arc::new(pg_schema(&wire_schema(frame.schema().as_arrow(), UTC))));
        }
        Ok(Some(Statement { sql: sql.to_string(), kind, schema, parameters }))
    }

    fn get_parameter_types(&self, statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(statement.parameters.iter().map(|t| t.as_ref().map_or(Type::UNKNOWN, pg_type)).collect())
    }

    fn get_result_schema(&self, statement: &Statement, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        match &statement.schema {
            Some(schema) => {
                arrow_pg::datatypes::arrow_schema_to_pg_fields(schema, format.unwrap_or(&Format::UnifiedText), None)
            }
            None => Ok(Vec::new()),
        }
    }
}

/// The Postgres type of a parameter that DataFusion inferred.
pub(super) fn pg_type(data_type: &DataType) -> Type {
    arrow_pg::datatypes::into_pg_type(&crate::netsql::wire_type(data_type, UTC)).unwrap_or(Type::UNKNOWN)
}

/// The type a column is sent as over the PostgreSQL protocol (after [`wire_schema`]): a
/// timestamp in UTC microseconds, the protocol's unit (arrow-pg would drop the minutes of a
/// zone offset such as +05:30 in text, and round a time before 1970 toward zero in binary but
/// down in text), a one-byte integer as int2 (arrow-pg sends its byte as int2's high byte), a
/// half float as float4, and what arrow-pg cannot encode — a list of lists, a map, a union, a
/// 256-bit decimal — as text in Arrow's notation (`[[1, 2], [3]]`, `{a: 1}`), where it failed
/// the statement with an internal error.
fn pg_type_of(data_type: &DataType) -> DataType {
    let field = |f: &Field| Arc::new(f.clone().with_data_type(pg_type_of(f.data_type())));
    // A list whose elements are lists, or hold anything sent as text, goes whole as text (a
    // cast cannot turn a list's inner values into text).
    let list_of = |f: &Field| (!becomes_text(data_type)).then(|| field(f));
    match data_type {
        DataType::Timestamp(..) => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        DataType::Int8 => DataType::Int16,
        DataType::Float16 => DataType::Float32,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => DataType::Decimal128(*p, *s),
        DataType::Dictionary(_, value) => pg_type_of(value),
        DataType::List(f) => list_of(f).map_or(DataType::Utf8, DataType::List),
        DataType::LargeList(f) => list_of(f).map_or(DataType::Utf8, DataType::LargeList),
        DataType::FixedSizeList(f, n) => list_of(f).map_or(DataType::Utf8, |f| DataType::FixedSizeList(f, *n)),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(|f| field(f)).collect()),
        other if as_text(other) => DataType::Utf8,
        other => other.clone(),
    }
}

/// Whether [`pg_type_of`] sends `data_type`, or something inside it, as text.
fn becomes_text(data_type: &DataType) -> bool {
    let is_list = |t: &DataType| matches!(t, DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..));
    match data_type {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            is_list(f.data_type()) || becomes_text(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| becomes_text(f.data_type())),
        DataType::Dictionary(_, value) => becomes_text(value),
        other => as_text(other),
    }
}

/// A type arrow-pg has no encoding for, sent as text.
fn as_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Map(..)
            | DataType::Union(..)
            | DataType::Decimal256(..)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::RunEndEncoded(..)
    )
}

/// `schema` with its columns' types as sent ([`pg_type_of`]).
fn pg_schema(schema: &Schema) -> Schema {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_data_type(pg_type_of(f.data_type()))).collect();
    Schema::new(fields).with_metadata(schema.metadata().clone())
}

/// `batch` in `schema` (from [`pg_schema`]): timestamps to UTC microseconds, rounded down (a
/// time before 1970 as in text), the rest cast.
fn wire_batch(batch: RecordBatch, schema: &SchemaRef) -> PgWireResult<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| pg_column(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error("22008", e.to_string()))?;
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(|e| internal(e.to_string()))
}

fn pg_column(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, arrow::error::ArrowError> {
    use arrow::datatypes::{
        TimestampMicrosecondType as Us, TimestampMillisecondType as Ms, TimestampNanosecondType as Ns,
        TimestampSecondType as S,
    };
    let from = column.data_type();
    if let (DataType::Struct(_), DataType::Struct(fields)) = (from, to)
        && from != to
    {
        // Field by field: a field may go as text, which a cast cannot do.
        let array = column.as_struct();
        let children =
            array.columns().iter().zip(fields).map(|(c, f)| pg_column(c, f.data_type())).collect::<Result<_, _>>()?;
        return Ok(Arc::new(arrow::array::StructArray::try_new(fields.clone(), children, array.nulls().cloned())?));
    }
    if *to == DataType::Utf8
        && !matches!(from, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        && !matches!(from, DataType::Dictionary(..))
    {
        let formatter = arrow::util::display::ArrayFormatter::try_new(column.as_ref(), &Default::default())?;
        let text: arrow::array::StringArray =
            (0..column.len()).map(|i| column.is_valid(i).then(|| formatter.value(i).to_string())).collect();
        return Ok(Arc::new(text));
    }
    let (DataType::Timestamp(unit, _), DataType::Timestamp(TimeUnit::Microsecond, zone)) = (from, to) else {
        return if from == to { Ok(column.clone()) } else { arrow::compute::cast(column, to) };
    };
    let out_of_range = |v: i64| {
        arrow::error::ArrowError::ComputeError(format!(
            "timestamp {v} ({unit:?}) is out of range for PostgreSQL (microseconds in an i64)"
        ))
    };
    let micros = match unit {
        TimeUnit::Nanosecond => column.as_primitive::<Ns>().unary::<_, Us>(|ns| ns.div_euclid(1000)),
        TimeUnit::Microsecond => column.as_primitive::<Us>().clone(),
        TimeUnit::Millisecond => {
            column.as_primitive::<Ms>().try_unary::<_, Us, _>(|v| v.checked_mul(1000).ok_or_else(|| out_of_range(v)))?
        }
        TimeUnit::Second => column
            .as_primitive::<S>()
            .try_unary::<_, Us, _>(|v| v.checked_mul(1_000_000).ok_or_else(|| out_of_range(v)))?,
    };
    Ok(Arc::new(micros.with_timezone_opt(zone.clone())))
}

/// An error of SQLSTATE `code`. A NUL in the message (from a parameter's bytes, say) is
/// written `\0`: the ErrorResponse field ends at the first NUL, and the rest of the message
/// would break the protocol's framing.
pub(super) fn error(code: &str, message: String) -> PgWireError {
    let message = if message.contains('\0') { message.replace('\0', "\\0") } else { message };
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), code.into(), message)))
}

fn internal(message: String) -> PgWireError {
    error("XX000", message)
}

/// A query error with its SQLSTATE.
fn user_error(e: &QueryError) -> PgWireError {
    match e {
        QueryError::ReadOnly { reason } => {
            error("25006", format!("Lockstep's SQL listener is read-only (queries only): {reason}"))
        }
        QueryError::MemoryLimit { message } => error("53200", crate::netsql::memory_limit_message(message)),
        other => match other {
            QueryError::DataFusion(d) => sqlstate_of(d),
            _ => None,
        }
        .map_or_else(
            || match other.kind() {
                lockstep_engine::ErrorKind::InvalidArgument => error("42000", other.to_string()),
                // undefined_object: an unknown job of `diagnose(…)`, say.
                lockstep_engine::ErrorKind::NotFound => error("42704", other.to_string()),
                _ => internal(other.to_string()),
            },
            |code| error(code, other.to_string()),
        ),
    }
}

/// PostgreSQL's SQLSTATE for what DataFusion says of the syntax, the data or the names in a
/// statement (QA pass 23b: a division by zero or a bad cast was XX000, an internal error, to
/// clients that retry or alert on that class): a syntax error 42601, division by zero 22012,
/// overflow 22003, a value that does not parse or cast 22P02, an invalid regular expression
/// 2201B, an unknown column 42703, an unknown table 42P01.
fn sqlstate_of(e: &datafusion::error::DataFusionError) -> Option<&'static str> {
    use arrow::error::ArrowError;
    use datafusion::common::SchemaError;
    use datafusion::error::DataFusionError as D;
    match e.find_root() {
        D::SQL(..) => Some("42601"),
        D::ArrowError(a, _) => match a.as_ref() {
            ArrowError::DivideByZero => Some("22012"),
            ArrowError::ArithmeticOverflow(_) => Some("22003"),
            ArrowError::ComputeError(m) if m.contains("overflow") => Some("22003"),
            ArrowError::CastError(_) | ArrowError::ParseError(_) => Some("22P02"),
            _ => None,
        },
        D::SchemaError(s, _) if matches!(s.as_ref(), SchemaError::FieldNotFound { .. }) => Some("42703"),
        D::Plan(m) if m.starts_with("table '") && m.ends_with("' not found") => Some("42P01"),
        D::External(e) if e.to_string().starts_with("regex parse error") => Some("2201B"),
        _ => None,
    }
}

/// A row whose text would pass `max` bytes ([`super::size::max_row_text`]; SQLSTATE 54000,
/// program_limit_exceeded).
fn row_too_large(column: &str, bytes: u64, max: u64) -> PgWireError {
    error(
        "54000",
        format!(
            "a result row would be about {} MiB as text (most of it in column {column:?}); a row is sent \
             only up to {} MiB (the statement's memory limit, `lockstep serve --query-memory-limit-mb`, \
             and at most 1 GiB, PostgreSQL's limit on a field): aggregate the list further or unnest it",
            bytes.div_ceil(1 << 20),
            max >> 20
        ),
    )
}

/// Why a statement stopped early: a cancel request, or the time limit (the session's
/// `statement_timeout` where `own`, else the server's).
fn interrupted(timeout: std::time::Duration, own: bool, cancelled: bool) -> PgWireError {
    if cancelled {
        error("57014", "canceling statement due to user request".into())
    } else if own {
        error(
            "57014",
            format!("canceling statement due to statement timeout ({} ms; SET statement_timeout)", timeout.as_millis()),
        )
    } else {
        error(
            "57014",
            format!(
                "canceling statement due to statement timeout ({} s; `lockstep serve --query-timeout-secs`)",
                timeout.as_secs()
            ),
        )
    }
}

impl Handlers {
    /// Runs one statement: plans it in a fresh session (binding `parameters`), and returns
    /// its rows as a stream under the statement's memory pool, time limit and cancel flag.
    async fn run<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        parameters: Vec<ScalarValue>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let settings = client.session_extensions().get_or_insert_with(Settings::default);
        let show = |name: &str, value: &str| -> PgWireResult<Response> {
            let batch = show_batch(name, value)?;
            let fields = Arc::new(arrow_pg::datatypes::arrow_schema_to_pg_fields(&batch.schema(), format, None)?);
            let rows: Vec<PgWireResult<DataRow>> =
                arrow_pg::datatypes::encode_recordbatch(fields.clone(), batch).collect();
            Ok(Response::Query(QueryResponse::new(fields, futures::stream::iter(rows))))
        };
        match &statement.kind {
            Kind::Begin => {
                settings.begin();
                return Ok(Response::TransactionStart(Tag::new("BEGIN")));
            }
            Kind::End(tag) => {
                settings.end();
                return Ok(Response::TransactionEnd(Tag::new(tag)));
            }
            Kind::Ignored(tag) => return Ok(Response::Execution(Tag::new(tag))),
            Kind::Unsupported(what) => return Err(error("0A000", format!("{what} are not supported by Lockstep"))),
            Kind::Show(name, value) => return show(name, value),
            Kind::Session(Session::Show(name)) => return show(name, &settings.show(name, self.shared.timeout)),
            Kind::Session(session) => {
                let (tag, notice) = settings.apply(session).map_err(|(code, message)| error(code, message))?;
                if let Some((severity, code, message)) = notice {
                    let info = ErrorInfo::new(severity.into(), code.into(), message);
                    client.send(PgWireBackendMessage::NoticeResponse(info.into())).await?;
                }
                return Ok(Response::Execution(Tag::new(tag)));
            }
            Kind::Query => {}
        }
        let flag = client.session_extensions().get::<Arc<CancelFlag>>().map(|f| f.as_ref().clone());
        let (timeout, own) = settings.time_limit(self.shared.timeout);
        let mut stop = crate::netsql::interrupt(flag, timeout, move |cancelled| interrupted(timeout, own, cancelled));
        let plan = self.shared.execute(&statement.sql, parameters, UTC);
        let (schema, batches) = tokio::select! {
            planned = plan => planned.map_err(|e| user_error(&e))?,
            e = &mut stop => return Err(e),
        };
        let may_be_large = super::size::may_be_large(&schema);
        let schema: SchemaRef = Arc::new(pg_schema(&schema));
        let fields = Arc::new(arrow_pg::datatypes::arrow_schema_to_pg_fields(&schema, format, None)?);
        let encode = fields.clone();
        let store = self.shared.store.clone();
        let max_row = super::size::max_row_text(self.shared.limits.memory_bytes);
        // Rows are encoded as they are sent (not a batch's rows at once), so what a statement
        // holds beyond its batches in flight is one row, however slowly the client reads. A
        // row's size is estimated before any of its text is built (a list sent as text too).
        let rows = batches
            .map(move |batch| {
                let rows: Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send> =
                    match batch.map_err(|e| user_error(&QueryError::from(e).located(&store))) {
                        Ok(batch) => {
                            let too_large = may_be_large.then(|| super::size::oversized_row(&batch, max_row)).flatten();
                            let sent = too_large.as_ref().map_or(batch.num_rows(), |(row, ..)| *row);
                            let tail = too_large.map(|(_, column, bytes)| Err(row_too_large(&column, bytes, max_row)));
                            let before: Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send> =
                                match wire_batch(batch.slice(0, sent), &schema).and_then(|batch| {
                                    super::floats::floats_as_text(batch, &encode).map_err(|e| internal(e.to_string()))
                                }) {
                                    Ok(batch) => arrow_pg::datatypes::encode_recordbatch(encode.clone(), batch),
                                    Err(e) => Box::new(std::iter::once(Err(e))),
                                };
                            Box::new(before.chain(tail))
                        }
                        Err(e) => Box::new(std::iter::once(Err(e))),
                    };
                futures::stream::iter(rows)
            })
            .flatten();
        let guarded = Guarded::new(Box::pin(rows), stop);
        Ok(Response::Query(QueryResponse::new(fields, guarded)))
    }
}

#[async_trait]
impl SimpleQueryHandler for Handlers {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut responses = Vec::new();
        let parts = lockstep_query::script::split_statements(query);
        // Several statements in one string are one implicit block in PostgreSQL (`SET LOCAL`).
        let settings = client.session_extensions().get_or_insert_with(Settings::default);
        let implicit = parts.len() > 1 && settings.begin_implicit();
        for part in parts {
            let statement =
                Statement { kind: classify(&part.sql), sql: part.sql, schema: None, parameters: Vec::new() };
            match self.run(client, &statement, Vec::new(), &Format::UnifiedText).await {
                Ok(response) => responses.push(response),
                Err(PgWireError::UserError(info)) => {
                    // Later statements of the string do not run, as in PostgreSQL.
                    responses.push(Response::Error(info));
                    break;
                }
                Err(e) => {
                    if implicit {
                        settings.end_implicit();
                    }
                    return Err(e);
                }
            }
        }
        if implicit {
            settings.end_implicit();
        }
        if responses.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handlers {
    type Statement = Statement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        self.parser.clone()
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Statement>, _max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = &portal.statement.statement;
        let required = statement.parameters.len();
        if statement.kind == Kind::Query && portal.parameter_len() != required {
            return Err(error(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {required}",
                    portal.parameter_len(),
                    // pgwire's name of the unnamed statement is PostgreSQL's "".
                    if portal.statement.id == pgwire::api::DEFAULT_NAME { "" } else { portal.statement.id.as_str() }
                ),
            ));
        }
        let parameters = (0..portal.parameter_len())
            .map(|i| {
                let declared = portal.statement.parameter_types.get(i).cloned().flatten();
                let inferred = statement.parameters.get(i).cloned().flatten();
                super::params::parameter(portal, i, declared, inferred)
            })
            .collect::<PgWireResult<Vec<_>>>()?;
        self.run(client, statement, parameters, &portal.result_column_format).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn statements_are_classified() {
        assert_eq!(classify("  BEGIN"), Kind::Begin);
        assert_eq!(classify("start transaction read only"), Kind::Begin);
        assert_eq!(classify("commit;"), Kind::End("COMMIT"));
        assert_eq!(classify("ROLLBACK"), Kind::End("ROLLBACK"));
        assert_eq!(classify("SET extra_float_digits = 3"), Kind::Session(Session::Quiet));
        assert_eq!(classify("DISCARD PLANS"), Kind::Ignored("DISCARD PLANS"));
        assert_eq!(classify("/* c */ -- c\n  SET statement_timeout = 5"), classify("SET statement_timeout = 5"));
        assert!(matches!(
            classify("-- c\nSET datafusion.execution.batch_size = 1"),
            Kind::Session(Session::Refused(..))
        ));
        assert_eq!(classify("show statement_timeout"), Kind::Session(Session::Show("statement_timeout")));
        assert_eq!(classify("SHOW TimeZone"), Kind::Show("TimeZone", "UTC"));
        assert_eq!(classify("show time zone;"), Kind::Show("TimeZone", "UTC"));
        assert_eq!(classify("SHOW \"DateStyle\""), Kind::Show("DateStyle", "ISO, MDY"));
        assert_eq!(classify("SHOW datafusion.execution.batch_size"), Kind::Query);
        assert_eq!(classify("SELECT 1"), Kind::Query);
        assert_eq!(classify("settings"), Kind::Query);
        assert_eq!(classify("with x as (select 1) select * from x"), Kind::Query);
    }

    #[test]
    fn timestamps_without_zone_are_sent_in_utc() {
        let schema = Schema::new(vec![
            Field::new("time", DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None), false),
            Field::new("value", DataType::Float64, false),
        ]);
        let wire = wire_schema(&schema, UTC);
        assert_eq!(
            wire.field(0).data_type(),
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, Some(UTC.into()))
        );
        assert_eq!(pg_type(wire.field(0).data_type()), Type::TIMESTAMPTZ);
        assert_eq!(wire.field(1).data_type(), &DataType::Float64);
    }
}
