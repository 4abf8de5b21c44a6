//! The Flight SQL service: statements, prepared statements, catalog metadata, SQL info, and
//! the refusals of a read-only server.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    Any, CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementSubstraitPlan, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    SqlSupportedTransaction, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightDescriptor,
    FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use futures::{Stream, StreamExt, TryStreamExt};
use lockstep_query::QueryError;
use prost::Message;
use tonic::{Request, Response, Status};

use super::UTC;
use crate::netsql::{CancelFlag, Guarded, Shared, wire_batch, wire_schema};

/// Prepared statements kept at most; past it the oldest is closed.
const MAX_PREPARED: usize = 4096;

/// A prepared statement: its SQL, result schema, parameter types and bound values.
#[derive(Debug, Clone)]
struct Prepared {
    sql: String,
    parameter_types: Vec<Option<DataType>>,
    parameters: Vec<ScalarValue>,
}

/// Prepared statements by id; a handle is the id and a keyed hash of it.
#[derive(Debug, Default)]
struct PreparedTable {
    next: u64,
    entries: BTreeMap<u64, Prepared>,
    key: std::collections::hash_map::RandomState,
}

impl PreparedTable {
    fn handle(&self, id: u64) -> Vec<u8> {
        let mut handle = id.to_be_bytes().to_vec();
        handle.extend(self.key.hash_one(id).to_be_bytes());
        handle
    }

    /// The id of a handle this table issued (closed or not).
    fn id(&self, handle: &[u8]) -> Result<u64, Status> {
        let unknown = || Status::not_found("unknown prepared statement handle (closed, or from another server run)");
        let (id, tag) = handle.split_at_checked(8).ok_or_else(unknown)?;
        let id = u64::from_be_bytes(id.try_into().map_err(|_| unknown())?);
        if self.handle(id).get(8..) != Some(tag) {
            return Err(unknown());
        }
        Ok(id)
    }

    fn insert(&mut self, prepared: Prepared) -> Vec<u8> {
        while self.entries.len() >= MAX_PREPARED {
            self.entries.pop_first();
        }
        let id = self.next;
        self.next += 1;
        self.entries.insert(id, prepared);
        self.handle(id)
    }
}

/// Statements running from a statement ticket, by the id in the ticket (for cancelling).
type Running = Arc<Mutex<HashMap<u64, Arc<CancelFlag>>>>;

/// Removes a statement from [`Running`] when its result stream ends or is dropped.
struct Registered {
    id: u64,
    running: Running,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&self.id);
        }
    }
}

/// The action that cancels the statement of a `FlightInfo` (Flight RPC).
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The Flight SQL service.
pub struct Service {
    shared: Arc<Shared>,
    prepared: Mutex<PreparedTable>,
    sql_info: SqlInfoData,
    next_statement: AtomicU64,
    running: Running,
}

/// Status for a poisoned lock (a panic elsewhere; not reachable from requests).
fn poisoned<T>(_: T) -> Status {
    Status::internal("prepared statement table unavailable")
}

impl Service {
    pub(super) fn new(shared: Arc<Shared>) -> Result<Self, FlightError> {
        let mut info = SqlInfoDataBuilder::new();
        info.append(SqlInfo::FlightSqlServerName, "Lockstep");
        info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        info.append(SqlInfo::FlightSqlServerArrowVersion, "59");
        info.append(SqlInfo::FlightSqlServerReadOnly, true);
        info.append(SqlInfo::FlightSqlServerSql, true);
        info.append(SqlInfo::FlightSqlServerSubstrait, false);
        info.append(SqlInfo::FlightSqlServerTransaction, SqlSupportedTransaction::None as i32);
        info.append(SqlInfo::FlightSqlServerCancel, true);
        info.append(SqlInfo::FlightSqlServerBulkIngestion, false);
        info.append(
            SqlInfo::FlightSqlServerStatementTimeout,
            i32::try_from(shared.timeout.as_secs()).unwrap_or(i32::MAX),
        );
        info.append(SqlInfo::SqlDdlCatalog, false);
        info.append(SqlInfo::SqlDdlSchema, false);
        info.append(SqlInfo::SqlDdlTable, false);
        info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        Ok(Service {
            shared,
            prepared: Mutex::new(PreparedTable::default()),
            sql_info: info.build()?,
            next_statement: AtomicU64::new(0),
            running: Arc::default(),
        })
    }

    /// Plans `sql` (with `parameters` bound) and returns its result schema as sent.
    async fn plan_schema(
        &self,
        sql: &str,
        parameters: Vec<ScalarValue>,
    ) -> Result<(SchemaRef, Vec<Option<DataType>>), Status> {
        let timeout = self.shared.timeout;
        let shared = self.shared.clone();
        let plan = async move {
            let engine = shared.engine()?;
            let mut frame = engine.sql(sql).await?;
            let types = frame.logical_plan().get_parameter_types().map_err(QueryError::from)?;
            // Bound as the statement runs: a parameter in the select list has the type and
            // nullability of its value there (ADBC checks the stream against this schema).
            if !parameters.is_empty() {
                frame = frame.with_param_values(parameters)?;
            }
            let types = (1..=types.len()).map(|i| types.get(&format!("${i}")).cloned().flatten()).collect();
            Ok::<_, QueryError>((Arc::new(sent_schema(frame.schema().as_arrow())), types))
        };
        match tokio::time::timeout(timeout, plan).await {
            Ok(planned) => planned.map_err(|e| status(&e)),
            Err(_) => Err(interrupted(timeout, false)),
        }
    }

    /// Runs `sql` with `parameters` bound and streams its batches, under the statement time
    /// limit and the cancel flag of statement `id` (if any); dropping the stream (the client
    /// went away) stops the statement.
    async fn run(&self, sql: String, parameters: Vec<ScalarValue>, id: Option<u64>) -> Result<DoGetStream, Status> {
        let timeout = self.shared.timeout;
        let registered = match id {
            Some(id) => {
                let flag = Arc::new(CancelFlag::default());
                self.running.lock().map_err(poisoned)?.insert(id, flag.clone());
                Some((flag, Registered { id, running: self.running.clone() }))
            }
            None => None,
        };
        let flag = registered.as_ref().map(|(flag, _)| flag.clone());
        let mut stop = crate::netsql::interrupt(flag, timeout, move |cancelled| interrupted(timeout, cancelled));
        let plan = self.shared.execute(&sql, parameters, UTC);
        let (schema, batches) = tokio::select! {
            planned = plan => planned.map_err(|e| status(&e))?,
            e = &mut stop => return Err(e),
        };
        // What GetFlightInfo announced (`sent_schema`): string views go out as strings.
        let schema = Arc::new(sent_schema(&schema));
        let sent = schema.clone();
        let store = self.shared.store.clone();
        let batches = batches.map(move |batch| {
            let _registered = &registered;
            batch
                .map_err(|e| status(&QueryError::from(e).located(&store)))
                .and_then(|b| wire_batch(b, &sent).map_err(|e| Status::internal(e.to_string())))
        });
        let guarded = Guarded::new(Box::pin(batches), stop).map_err(FlightError::from);
        let encoded = FlightDataEncoderBuilder::new().with_schema(schema).build(guarded).map_err(Status::from);
        Ok(Box::pin(encoded))
    }

    /// Cancels the running statements of `info`'s endpoints; whether there was one.
    fn cancel(&self, info: &FlightInfo) -> Result<bool, Status> {
        let running = self.running.lock().map_err(poisoned)?;
        let mut found = false;
        for ticket in info.endpoint.iter().filter_map(|e| e.ticket.as_ref()) {
            let Ok(any) = Any::decode(&*ticket.ticket) else { continue };
            let Ok(Some(statement)) = any.unpack::<TicketStatementQuery>() else { continue };
            let Some(id) = statement.statement_handle.get(..8).and_then(|b| b.try_into().ok()) else { continue };
            if let Some(flag) = running.get(&u64::from_be_bytes(id)) {
                flag.cancel();
                found = true;
            }
        }
        Ok(found)
    }

    /// A prepared statement by handle.
    fn prepared(&self, handle: &[u8]) -> Result<(u64, Prepared), Status> {
        let table = self.prepared.lock().map_err(poisoned)?;
        let id = table.id(handle)?;
        let prepared = table
            .entries
            .get(&id)
            .cloned()
            .ok_or_else(|| Status::not_found("prepared statement was closed (or evicted: too many open)"))?;
        Ok((id, prepared))
    }

    /// The tables of a fresh session: (catalog, schema, table, type, schema as sent).
    async fn tables(&self) -> Result<Vec<(String, String, String, &'static str, Schema)>, Status> {
        let engine = self.shared.engine().map_err(|e| status(&e))?;
        let context = engine.context();
        let mut tables = Vec::new();
        for catalog_name in context.catalog_names() {
            let Some(catalog) = context.catalog(&catalog_name) else { continue };
            for schema_name in catalog.schema_names() {
                let Some(schema) = catalog.schema(&schema_name) else { continue };
                for table_name in schema.table_names() {
                    let Ok(Some(table)) = schema.table(&table_name).await else { continue };
                    let kind = match table.table_type() {
                        TableType::Base => "TABLE",
                        TableType::View => "VIEW",
                        TableType::Temporary => "LOCAL TEMPORARY",
                    };
                    let wire = sent_schema(&table.schema());
                    tables.push((catalog_name.clone(), schema_name.clone(), table_name, kind, wire));
                }
            }
        }
        tables.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
        Ok(tables)
    }
}

/// The schema of a result as the client receives it: timestamps without a zone in UTC,
/// dictionary-encoded columns as their values, and string views (the samples table's labels)
/// as plain strings, which every Flight SQL client reads (`wire_batch` casts to it).
fn sent_schema(schema: &Schema) -> Schema {
    let wire = wire_schema(schema, UTC);
    let fields: Vec<Field> = wire
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, values) => f.as_ref().clone().with_data_type(values.as_ref().clone()),
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            DataType::BinaryView => f.as_ref().clone().with_data_type(DataType::Binary),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new(fields).with_metadata(wire.metadata().clone())
}

/// The response stream of `DoGet`.
type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

/// A query error as a status.
fn status(e: &QueryError) -> Status {
    match e {
        QueryError::ReadOnly { reason } => {
            Status::permission_denied(format!("Lockstep's SQL listener is read-only (queries only): {reason}"))
        }
        QueryError::MemoryLimit { message } => Status::resource_exhausted(crate::netsql::memory_limit_message(message)),
        QueryError::DataFusion(d) if matches!(d.find_root(), datafusion::error::DataFusionError::SQL(..)) => {
            Status::invalid_argument(e.to_string())
        }
        QueryError::DataFusion(d) if matches!(d.find_root(), datafusion::error::DataFusionError::Plan(..)) => {
            Status::invalid_argument(e.to_string())
        }
        other => match other.kind() {
            lockstep_engine::ErrorKind::InvalidArgument => Status::invalid_argument(other.to_string()),
            lockstep_engine::ErrorKind::NotFound => Status::not_found(other.to_string()),
            _ => Status::internal(other.to_string()),
        },
    }
}

/// Why a statement stopped early.
fn interrupted(timeout: std::time::Duration, cancelled: bool) -> Status {
    if cancelled {
        Status::cancelled("canceling statement due to user request")
    } else {
        Status::deadline_exceeded(format!(
            "canceling statement due to statement timeout ({} s; `lockstep serve --query-timeout-secs`)",
            timeout.as_secs()
        ))
    }
}

fn read_only(what: &str) -> Status {
    Status::permission_denied(format!("Lockstep's SQL listener is read-only (queries only): {what} is refused"))
}

/// A `FlightInfo` for `schema` whose one endpoint's ticket is `ticket` (redeemed here).
fn flight_info(schema: &Schema, ticket: Any, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor)
        .with_ordered(true);
    Ok(Response::new(info))
}

/// One metadata batch as a `DoGet` stream.
fn one_batch(batch: arrow_flight::error::Result<RecordBatch>) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(batch.schema())
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(Status::from);
    Ok(Response::new(Box::pin(stream)))
}

/// The bound values of a parameter batch: exactly one row, cast to the inferred types.
fn parameter_values(batches: &[RecordBatch], types: &[Option<DataType>]) -> Result<Vec<ScalarValue>, Status> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(Vec::new());
    };
    if rows != 1 {
        return Err(Status::invalid_argument(format!(
            "bind one row of parameters per execution of a query ({rows} rows given)"
        )));
    }
    batch
        .columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let bad = |e: String| Status::invalid_argument(format!("parameter ${}: {e}", i + 1));
            let value = ScalarValue::try_from_array(column, 0).map_err(|e| bad(e.to_string()))?;
            match types.get(i).cloned().flatten() {
                Some(target) if value.is_null() => ScalarValue::try_from(&target).map_err(|e| bad(e.to_string())),
                Some(target) if value.data_type() != target => {
                    value.cast_to(&target).map_err(|e| bad(format!("not a {target}: {e}")))
                }
                _ => Ok(value),
            }
        })
        .collect()
}

#[tonic::async_trait]
impl FlightSqlService for Service {
    type FlightService = Service;

    async fn do_handshake(&self, request: super::Handshake) -> Result<Response<super::HandshakeStream>, Status> {
        super::handshake(&request)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let (schema, _) = self.plan_schema(&query.query, Vec::new()).await?;
        // The ticket: a statement id (to cancel it by its FlightInfo) and the SQL.
        let mut handle = self.next_statement.fetch_add(1, Ordering::Relaxed).to_be_bytes().to_vec();
        handle.extend(query.query.into_bytes());
        let ticket = TicketStatementQuery { statement_handle: handle.into() };
        flight_info(&schema, ticket.as_any(), request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let bad = || Status::invalid_argument("the statement ticket is not an id and UTF-8 SQL");
        let (id, sql) = ticket.statement_handle.split_at_checked(8).ok_or_else(bad)?;
        let id = u64::from_be_bytes(id.try_into().map_err(|_| bad())?);
        let sql = String::from_utf8(sql.to_vec()).map_err(|_| bad())?;
        Ok(Response::new(self.run(sql, Vec::new(), Some(id)).await?))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let (_, prepared) = self.prepared(&query.prepared_statement_handle)?;
        let bound = if prepared.parameters.len() >= prepared.parameter_types.len() {
            prepared.parameters.clone()
        } else {
            Vec::new()
        };
        let (schema, _) = self.plan_schema(&prepared.sql, bound).await?;
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let (_, prepared) = self.prepared(&query.prepared_statement_handle)?;
        if prepared.parameters.len() < prepared.parameter_types.len() {
            return Err(Status::invalid_argument(format!(
                "the statement has {} parameters; {} bound",
                prepared.parameter_types.len(),
                prepared.parameters.len()
            )));
        }
        Ok(Response::new(self.run(prepared.sql, prepared.parameters, None).await?))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let (schema, parameter_types) = self.plan_schema(&query.query, Vec::new()).await?;
        let ipc = |schema: &Schema| -> Result<_, Status> {
            let IpcMessage(bytes) = SchemaAsIpc::new(schema, &Default::default())
                .try_into()
                .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
            Ok(bytes)
        };
        let parameter_schema = if parameter_types.iter().all(Option::is_some) && !parameter_types.is_empty() {
            let fields: Vec<Field> = parameter_types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("${}", i + 1), t.clone().unwrap_or(DataType::Null), true))
                .collect();
            ipc(&Schema::new(fields))?
        } else {
            Default::default()
        };
        let dataset_schema = ipc(&schema)?;
        let prepared = Prepared { sql: query.query, parameter_types, parameters: Vec::new() };
        let handle = self.prepared.lock().map_err(poisoned)?.insert(prepared);
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        let mut table = self.prepared.lock().map_err(poisoned)?;
        let id = table.id(&query.prepared_statement_handle)?;
        table.entries.remove(&id);
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let (id, prepared) = self.prepared(&query.prepared_statement_handle)?;
        let mut batches = Vec::new();
        let mut rows = 0;
        let mut stream = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
            request.into_inner().map_err(FlightError::from),
        );
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| Status::invalid_argument(format!("reading the parameters: {e}")))?;
            rows += batch.num_rows();
            batches.push(batch);
            if rows > 1 {
                break;
            }
        }
        let parameters = parameter_values(&batches, &prepared.parameter_types)?;
        let mut table = self.prepared.lock().map_err(poisoned)?;
        if let Some(entry) = table.entries.get_mut(&id) {
            entry.parameters = parameters;
        }
        Ok(DoPutPreparedStatementResult { prepared_statement_handle: Some(query.prepared_statement_handle) })
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        let mut catalogs: Vec<String> = self.tables().await?.into_iter().map(|t| t.0).collect();
        catalogs.dedup();
        for catalog in catalogs {
            builder.append(catalog);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        let mut schemas: Vec<(String, String)> = self.tables().await?.into_iter().map(|t| (t.0, t.1)).collect();
        schemas.dedup();
        for (catalog, schema) in schemas {
            builder.append(catalog, schema);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for (catalog, schema, table, kind, table_schema) in self.tables().await? {
            builder.append(catalog, schema, table, kind, &table_schema).map_err(|e| Status::internal(e.to_string()))?;
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for kind in ["LOCAL TEMPORARY", "TABLE", "VIEW"] {
            builder.append(kind);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        flight_info(&schema, query.as_any(), request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        one_batch(query.into_builder(&self.sql_info).build())
    }

    async fn do_put_statement_update(
        &self,
        _ticket: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("an update statement"))
    }

    async fn do_put_statement_ingest(
        &self,
        _ticket: CommandStatementIngest,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("bulk ingestion (write samples through the ingest port)"))
    }

    async fn do_put_prepared_statement_update(
        &self,
        _query: CommandPreparedStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(read_only("an update statement"))
    }

    async fn do_put_substrait_plan(
        &self,
        _query: CommandStatementSubstraitPlan,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(Status::unimplemented("Substrait plans are not supported; send SQL"))
    }

    async fn do_action_cancel_query(
        &self,
        query: arrow_flight::sql::ActionCancelQueryRequest,
        _request: Request<Action>,
    ) -> Result<arrow_flight::sql::ActionCancelQueryResult, Status> {
        let info = FlightInfo::decode(query.info).map_err(|e| Status::invalid_argument(format!("FlightInfo: {e}")))?;
        // CANCEL_RESULT_CANCELLED, or CANCEL_RESULT_NOT_CANCELLABLE (not running).
        let result = if self.cancel(&info)? { 1 } else { 3 };
        Ok(arrow_flight::sql::ActionCancelQueryResult { result })
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as arrow_flight::flight_service_server::FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!("unknown action {:?}", action.r#type)));
        }
        let cancel = CancelFlightInfoRequest::decode(action.body)
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfoRequest: {e}")))?;
        let info = cancel.info.ok_or_else(|| Status::invalid_argument("CancelFlightInfoRequest without info"))?;
        if !self.cancel(&info)? {
            return Err(Status::not_found("no statement of that FlightInfo is running"));
        }
        let result = CancelFlightInfoResult { status: CancelStatus::Cancelled as i32 };
        let body = arrow_flight::Result { body: result.encode_to_vec().into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.into(),
            description: "Cancels the running statement of a FlightInfo.\n
                Request Message: CancelFlightInfoRequest\n
                Response Message: CancelFlightInfoResult"
                .into(),
        })])
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn prepared_handles_are_checked() {
        let mut table = PreparedTable::default();
        let handle =
            table.insert(Prepared { sql: "SELECT 1".into(), parameter_types: Vec::new(), parameters: Vec::new() });
        assert_eq!(table.id(&handle).unwrap(), 0);
        for bad in [&b""[..], b"1234", &handle[..15], &[0u8; 16]] {
            assert_eq!(table.id(bad).unwrap_err().code(), tonic::Code::NotFound);
        }
        let mut forged = handle.clone();
        forged[7] = 1;
        assert!(table.id(&forged).is_err());
        for _ in 0..MAX_PREPARED + 5 {
            table.insert(Prepared { sql: "SELECT 1".into(), parameter_types: Vec::new(), parameters: Vec::new() });
        }
        assert_eq!(table.entries.len(), MAX_PREPARED);
        assert!(!table.entries.contains_key(&0));
    }

    #[test]
    fn parameters_are_one_row_cast_to_the_inferred_types() {
        let batch = RecordBatch::try_from_iter([
            ("a", Arc::new(arrow::array::Int64Array::from(vec![5])) as arrow::array::ArrayRef),
            ("b", Arc::new(arrow::array::StringArray::from(vec!["x"])) as arrow::array::ArrayRef),
        ])
        .unwrap();
        let values = parameter_values(std::slice::from_ref(&batch), &[Some(DataType::Float64), None]).unwrap();
        assert_eq!(values, vec![ScalarValue::Float64(Some(5.0)), ScalarValue::Utf8(Some("x".into()))]);
        let two = arrow::compute::concat_batches(&batch.schema(), [&batch, &batch]).unwrap();
        assert_eq!(parameter_values(&[two], &[]).unwrap_err().code(), tonic::Code::InvalidArgument);
        assert!(parameter_values(&[], &[]).unwrap().is_empty());
    }
}
