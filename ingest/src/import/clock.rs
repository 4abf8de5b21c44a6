//! Clock-sync input of a bundle: `clock_sync.parquet|csv` (NTP-style exchanges),
//! `clock_offsets.parquet|csv` (directly known offsets, e.g. from chrony or PTP logs), and
//! collective barriers derived from the imported `collective_end` series.
//!
//! * `clock_sync`: `host` (string), `t1`, `t2`, `t3`, `t4` (i64 ns): t1 host sends, t2
//!   reference receives, t3 reference replies (reference clock), t4 host receives (host clock).
//! * `clock_offsets`: `host`, `local_time` (i64 ns, host clock), `offset_ns` (local −
//!   reference), `uncertainty_ns` (≥ 0).
//! * `collective_end`: a sample per rank per collective, stamped with the host clock when the
//!   collective ended there, whose value is the collective's sequence number within its `job`
//!   (label). The same (job, number) on two hosts is the same collective, so the ends are
//!   barrier constraints between those hosts' clocks (see `docs/clock.md`).
//!
//! Both files are read and every row validated *before* the samples are imported, so a bad
//! row imports nothing (errors name the file and the 1-based row).

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use lockstep_engine::Store;
use lockstep_engine::clock::{BarrierEvent, OffsetObservation, SyncExchange};
use lockstep_engine::series::SeriesFilter;
use lockstep_engine::store::ScanRequest;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::ImportError;

/// The metric whose samples mark the end of one collective on one rank.
pub const COLLECTIVE_END_METRIC: &str = "collective_end";

/// Validated clock input read from a bundle.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClockInput {
    /// NTP-style exchanges.
    pub exchanges: Vec<SyncExchange>,
    /// Directly known offsets.
    pub offsets: Vec<OffsetObservation>,
}

impl ClockInput {
    /// Whether there is nothing to add.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty() && self.offsets.is_empty()
    }
}

/// Finds `<stem>.parquet` or `<stem>.csv` in `dir`.
fn find(dir: &Path, stem: &str) -> Option<PathBuf> {
    ["parquet", "csv"].iter().map(|ext| dir.join(format!("{stem}.{ext}"))).find(|p| p.is_file())
}

/// Reads and validates the bundle's clock files (absent files give empty input).
pub fn read_clock_input(bundle: &Path) -> Result<ClockInput, ImportError> {
    let mut input = ClockInput::default();
    if let Some(path) = find(bundle, "clock_sync") {
        read_table(&path, &["t1", "t2", "t3", "t4"], &mut |row, host, v| {
            let e = SyncExchange { host: host.to_string(), t1: v[0], t2: v[1], t3: v[2], t4: v[3] };
            e.validate().map_err(|e| bad_row(&path, row, e))?;
            input.exchanges.push(e);
            Ok(())
        })?;
    }
    if let Some(path) = find(bundle, "clock_offsets") {
        read_table(&path, &["local_time", "offset_ns", "uncertainty_ns"], &mut |row, host, v| {
            let o =
                OffsetObservation { host: host.to_string(), local_time: v[0], offset_ns: v[1], uncertainty_ns: v[2] };
            o.validate().map_err(|e| bad_row(&path, row, e))?;
            input.offsets.push(o);
            Ok(())
        })?;
    }
    Ok(input)
}

fn bad_row(path: &Path, row: u64, e: lockstep_engine::Error) -> ImportError {
    let reason = match e {
        lockstep_engine::Error::ClockSync { reason, .. } => reason,
        other => other.to_string(),
    };
    ImportError::BadRow { file: path.to_path_buf(), row, reason }
}

type RowFn<'a> = dyn FnMut(u64, &str, &[i64]) -> Result<(), ImportError> + 'a;

/// Streams a table with a `host` string column and the named i64 columns.
fn read_table(path: &Path, columns: &[&str], each: &mut RowFn<'_>) -> Result<(), ImportError> {
    let is_parquet = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    if is_parquet {
        super::without_panics(path, || read_parquet(path, columns, each))
    } else {
        read_csv(path, columns, each)
    }
}

fn bad_file(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::BadFile { file: path.to_path_buf(), reason: reason.into() }
}

fn read_parquet(path: &Path, columns: &[&str], each: &mut RowFn<'_>) -> Result<(), ImportError> {
    let file = File::open(path).map_err(|e| bad_file(path, e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad_file(path, super::parquet_reader::open_error(&e)))?;
    let schema = builder.schema().clone();
    let index =
        |name: &str| schema.index_of(name).map_err(|_| bad_file(path, format!("missing required column {name}")));
    let host_i = index("host")?;
    let value_i = columns.iter().map(|c| index(c)).collect::<Result<Vec<_>, _>>()?;
    for &i in &value_i {
        let dt = schema.field(i).data_type();
        if !matches!(dt, DataType::Int64 | DataType::Int32 | DataType::UInt32 | DataType::Timestamp(_, _)) {
            return Err(bad_file(path, format!("column {} has type {dt}, expected Int64 ns", schema.field(i).name())));
        }
    }
    let reader = builder.with_batch_size(64 * 1024).build().map_err(|e| bad_file(path, e.to_string()))?;
    let mut row = 0u64;
    let mut values = vec![0i64; columns.len()];
    for batch in reader {
        let batch: RecordBatch = batch.map_err(|e| bad_file(path, format!("decode failed after row {row}: {e}")))?;
        let hosts =
            cast(batch.column(host_i), &DataType::Utf8).map_err(|e| bad_file(path, format!("column host: {e}")))?;
        let hosts = hosts.as_string::<i32>();
        let ints = value_i
            .iter()
            .map(|&i| {
                int_ns(batch.column(i)).map_err(|e| bad_file(path, format!("column {}: {e}", schema.field(i).name())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..batch.num_rows() {
            row += 1;
            if hosts.is_null(r) {
                return Err(ImportError::BadRow { file: path.to_path_buf(), row, reason: "host is null".into() });
            }
            for (k, col) in ints.iter().enumerate() {
                if col.is_null(r) {
                    return Err(ImportError::BadRow {
                        file: path.to_path_buf(),
                        row,
                        reason: format!("{} is null", columns[k]),
                    });
                }
                values[k] = col.as_primitive::<Int64Type>().value(r);
            }
            each(row, hosts.value(r), &values)?;
        }
    }
    Ok(())
}

/// An integer or timestamp column as i64 nanoseconds: timestamps of any unit are converted
/// (a `timestamp[ms]` column is not misread as ns); integers are taken as ns.
fn int_ns(column: &arrow::array::ArrayRef) -> Result<arrow::array::ArrayRef, arrow::error::ArrowError> {
    match column.data_type() {
        DataType::Timestamp(unit, _) if *unit != TimeUnit::Nanosecond => {
            let ns = cast(column, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            cast(&ns, &DataType::Int64)
        }
        _ => cast(column, &DataType::Int64),
    }
}

fn read_csv(path: &Path, columns: &[&str], each: &mut RowFn<'_>) -> Result<(), ImportError> {
    let mut reader =
        csv::ReaderBuilder::new().has_headers(true).from_path(path).map_err(|e| bad_file(path, e.to_string()))?;
    let headers = reader.headers().map_err(|e| bad_file(path, e.to_string()))?.clone();
    let index = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| bad_file(path, format!("missing required column {name}")))
    };
    let host_i = index("host")?;
    let value_i = columns.iter().map(|c| index(c)).collect::<Result<Vec<_>, _>>()?;
    let mut values = vec![0i64; columns.len()];
    let mut record = csv::StringRecord::new();
    let mut row = 0u64;
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                return Err(ImportError::BadRow { file: path.to_path_buf(), row: row + 1, reason: e.to_string() });
            }
        }
        row += 1;
        let field = |i: usize| record.get(i).map(str::trim).unwrap_or("");
        let host = field(host_i);
        for (k, &i) in value_i.iter().enumerate() {
            values[k] = field(i).parse::<i64>().map_err(|_| ImportError::BadRow {
                file: path.to_path_buf(),
                row,
                reason: format!("{} {:?} is not an integer number of ns", columns[k], field(i)),
            })?;
        }
        each(row, host, &values)?;
    }
    Ok(())
}

/// A collective instance id unique per (job, sequence number): the job name's FNV-1a hash in
/// the high 32 bits, the sequence number in the low 32.
pub fn barrier_instance(job: &str, sequence: u32) -> u64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (u64::from(h) << 32) | u64::from(sequence)
}

/// Collects every `collective_end` sample in the store as barrier events, one per host and
/// collective (the earliest end among the host's ranks). Samples without a host, or whose value
/// is not a non-negative integer below 2³², are ignored.
pub fn collective_barriers(store: &Store) -> Result<Vec<BarrierEvent>, ImportError> {
    let filter = SeriesFilter { metrics: Some(vec![COLLECTIVE_END_METRIC.to_string()]), labels: Vec::new() };
    let (series, keys) = store.with_catalog(|c| {
        let set = c.select(&filter);
        let keys: Vec<_> = set.iter().map(|id| (id, c.key(id).cloned())).collect();
        (set, keys)
    })?;
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let mut hosts: Vec<String> = Vec::new();
    let mut meta: std::collections::HashMap<u32, (u32, String)> = std::collections::HashMap::new();
    for (id, key) in keys {
        let Some(key) = key else { continue };
        let Some(host) = key.host() else { continue };
        let h = match hosts.iter().position(|x| x == host) {
            Some(h) => h,
            None => {
                hosts.push(host.to_string());
                hosts.len() - 1
            }
        };
        let job = key.labels.get("job").map(ToString::to_string).unwrap_or_default();
        meta.insert(id, (h as u32, job));
    }
    // Several ranks share a host: keep the earliest end per (host, collective); every rank
    // leaves after the last one entered, so the earliest exit is still a barrier exit.
    let mut first: std::collections::HashMap<(u32, u64), i64> = std::collections::HashMap::new();
    let mut scan = store.scan(ScanRequest { time: None, series: Some(series), value: None })?;
    while let Some(rows) = scan.next_rows() {
        let rows = rows?;
        for i in 0..rows.len() {
            let v = rows.value[i];
            let Some(&(host, ref job)) = meta.get(&rows.series[i]) else { continue };
            if !((0.0..4_294_967_296.0).contains(&v) && v.fract() == 0.0) {
                continue;
            }
            let t = rows.time[i];
            first.entry((host, barrier_instance(job, v as u32))).and_modify(|e| *e = (*e).min(t)).or_insert(t);
        }
    }
    let mut out: Vec<BarrierEvent> = first
        .into_iter()
        .map(|((host, instance), local_end)| BarrierEvent { host: hosts[host as usize].clone(), instance, local_end })
        .collect();
    out.sort_by(|a, b| (a.local_end, &a.host).cmp(&(b.local_end, &b.host)));
    Ok(out)
}
