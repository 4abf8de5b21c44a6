//! The sample sink: a registry of series (host, metric, labels) and a row-batch builder for the
//! long-format `samples.parquet`. Emitters register each series once and then push
//! `(series, local time, value)` in their hot loops without allocating; full batches go to a
//! writer thread over a bounded channel, so memory stays bounded and encoding overlaps generation.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::SimError;

/// Label columns of `samples.parquet`, in column order after `time, host, metric, value`.
pub(crate) const LABELS: [&str; 14] = [
    "gpu",
    "device",
    "port",
    "switch",
    "guid",
    "cpu",
    "mode",
    "collective",
    "comm_name",
    "slurm_job_id",
    "rank",
    "job",
    "pool",
    "quantile",
];

/// A label key (index into [`LABELS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    Gpu = 0,
    Device,
    Port,
    Switch,
    Guid,
    Cpu,
    Mode,
    Collective,
    CommName,
    SlurmJobId,
    Rank,
    Job,
    Pool,
    Quantile,
}

const NL: usize = LABELS.len();

/// Handle of a registered series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeriesId(u32);

/// Parquet writer settings shared by the bundle's files: zstd, 1 Mi-row row groups.
pub(crate) fn writer_properties() -> WriterProperties {
    let zstd = ZstdLevel::try_new(1).map_or(Compression::SNAPPY, Compression::ZSTD);
    WriterProperties::builder().set_compression(zstd).set_max_row_group_row_count(Some(1 << 20)).build()
}

/// The schema of `samples.parquet`.
pub(crate) fn samples_schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("time", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
    ];
    fields.extend(LABELS.iter().map(|l| Field::new(*l, DataType::Utf8, true)));
    Arc::new(Schema::new(fields))
}

/// Totals reported when the sink is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SinkStats {
    /// Rows written.
    pub(crate) samples: u64,
    /// Distinct series with at least one row.
    pub(crate) series: u64,
}

/// Collects rows into batches and hands them to the writer thread.
pub(crate) struct Sink {
    hosts: Vec<Box<str>>,
    host_ids: HashMap<Box<str>, u32>,
    series_host: Vec<u32>,
    series_metric: Vec<&'static str>,
    series_labels: Vec<Option<Box<str>>>,
    seen: Vec<bool>,
    time: Vec<i64>,
    value: Vec<f64>,
    host_col: StringBuilder,
    metric_col: StringBuilder,
    label_cols: Vec<StringBuilder>,
    batch_rows: usize,
    schema: SchemaRef,
    tx: SyncSender<RecordBatch>,
    path: PathBuf,
    samples: u64,
}

impl Sink {
    /// A sink sending batches of `batch_rows` rows to `tx`; `path` names the file in errors.
    pub(crate) fn new(tx: SyncSender<RecordBatch>, batch_rows: usize, path: &Path) -> Self {
        let mut sink = Self {
            hosts: Vec::new(),
            host_ids: HashMap::new(),
            series_host: Vec::new(),
            series_metric: Vec::new(),
            series_labels: Vec::new(),
            seen: Vec::new(),
            time: Vec::new(),
            value: Vec::new(),
            host_col: StringBuilder::new(),
            metric_col: StringBuilder::new(),
            label_cols: Vec::new(),
            batch_rows: batch_rows.max(1),
            schema: samples_schema(),
            tx,
            path: path.to_path_buf(),
            samples: 0,
        };
        sink.reset_builders();
        sink
    }

    fn reset_builders(&mut self) {
        let n = self.batch_rows;
        self.time = Vec::with_capacity(n);
        self.value = Vec::with_capacity(n);
        self.host_col = StringBuilder::with_capacity(n, n * 8);
        self.metric_col = StringBuilder::with_capacity(n, n * 32);
        self.label_cols = (0..NL).map(|_| StringBuilder::with_capacity(n, n)).collect();
    }

    /// Registers a series and returns its handle.
    pub(crate) fn register(&mut self, host: &str, metric: &'static str, labels: &[(Label, &str)]) -> SeriesId {
        let next = self.hosts.len() as u32;
        let host_id = *self.host_ids.entry(host.into()).or_insert(next);
        if host_id == next {
            self.hosts.push(host.into());
        }
        let id = SeriesId(self.series_host.len() as u32);
        self.series_host.push(host_id);
        self.series_metric.push(metric);
        let mut row: [Option<Box<str>>; NL] = Default::default();
        for (label, value) in labels {
            row[*label as usize] = Some((*value).into());
        }
        self.series_labels.extend(row);
        self.seen.push(false);
        id
    }

    /// Appends one sample of series `id` stamped `time` (ns, clock of the series' host).
    pub(crate) fn push(&mut self, id: SeriesId, time: i64, value: f64) -> Result<(), SimError> {
        let s = id.0 as usize;
        self.time.push(time);
        self.value.push(value);
        self.host_col.append_value(&self.hosts[self.series_host[s] as usize]);
        self.metric_col.append_value(self.series_metric[s]);
        for (col, v) in self.label_cols.iter_mut().zip(&self.series_labels[s * NL..(s + 1) * NL]) {
            match v {
                Some(v) => col.append_value(v),
                None => col.append_null(),
            }
        }
        self.seen[s] = true;
        if self.time.len() >= self.batch_rows {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SimError> {
        let n = self.time.len();
        if n == 0 {
            return Ok(());
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(std::mem::take(&mut self.time))),
            Arc::new(self.host_col.finish()),
            Arc::new(self.metric_col.finish()),
            Arc::new(Float64Array::from(std::mem::take(&mut self.value))),
        ];
        cols.extend(self.label_cols.iter_mut().map(|c| Arc::new(c.finish()) as ArrayRef));
        let batch = RecordBatch::try_new(self.schema.clone(), cols)
            .map_err(|source| SimError::Arrow { path: self.path.clone(), source })?;
        self.reset_builders();
        self.samples += n as u64;
        self.tx.send(batch).map_err(|_| SimError::WriterStopped { path: self.path.clone() })
    }

    /// Sends the last partial batch and closes the channel.
    pub(crate) fn finish(mut self) -> Result<SinkStats, SimError> {
        self.flush()?;
        Ok(SinkStats { samples: self.samples, series: self.seen.iter().filter(|s| **s).count() as u64 })
    }
}

/// The writer thread's loop: writes every batch it receives, then closes the file.
pub(crate) fn write_batches(file: File, path: &Path, rx: Receiver<RecordBatch>) -> Result<(), SimError> {
    let parquet_err = |source| SimError::Parquet { path: path.to_path_buf(), source };
    let mut writer = ArrowWriter::try_new(file, samples_schema(), Some(writer_properties())).map_err(parquet_err)?;
    for batch in rx {
        writer.write(&batch).map_err(parquet_err)?;
    }
    writer.close().map_err(parquet_err)?;
    Ok(())
}
