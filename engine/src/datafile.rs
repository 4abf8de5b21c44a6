//! Parquet data files: immutable, one time partition each, rows sorted by (series, time)
//! with no duplicate (series, time) pairs.
//!
//! Column layout (see `docs/format-storage.md`):
//! - `series_id` UInt32: dictionary/RLE, near free because rows are sorted by series;
//! - `time` Int64 (nullable): `DELTA_BINARY_PACKED` (regular sampling makes deltas
//!   constant); a series run whose timestamps repeat those of the run before it in the row
//!   group stores nulls instead (series of one scrape share their timestamps);
//! - `value_int` Int64 (nullable) + `value_scale` Int8 (nullable): values that are exact
//!   decimals `m / 10^k` are stored as the integer mantissa `m` (one scale per series run),
//!   `BYTE_STREAM_SPLIT` (byte planes that zstd compresses: high bytes that neighbours share
//!   cost almost nothing); a counter's run stores differences of mantissas instead, flagged
//!   by `value_scale + 32` (`datafile/codec.rs`);
//! - `value_float` Float64 (nullable): every other value (NaN, ±inf, full-precision floats),
//!   `BYTE_STREAM_SPLIT`.
//!
//! Every value round-trips bit-exactly. All columns are zstd-compressed.

mod checksum;
mod codec;
mod pages;
mod read;
mod split;
mod valuestats;
mod write;

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use roaring::RoaringBitmap;

pub use codec::{ValueDecoder, decode_values, encode_values};
pub use read::{RowGroups, read_file};
pub(crate) use split::retain;
pub use split::{Chunk, Columns, FileFooter, GroupStats};
pub use valuestats::{RunRange, ValueRange};
pub use write::{DataFileWriter, write_file, write_file_range};

/// How data files are opened: the schema comes from the Parquet schema, not from the
/// embedded Arrow schema (`ARROW:schema`, an IPC flatbuffer), whose decoder panics on some
/// corrupt bytes; the two agree for every file the writer produces, and `check_schema`
/// checks the result either way.
fn reader_options() -> parquet::arrow::arrow_reader::ArrowReaderOptions {
    parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_skip_arrow_metadata(true)
}

std::thread_local! {
    /// How many [`catch_panic`] calls are running on this thread.
    static CATCHING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Where the last panic caught on this thread happened (set by the hook of
    /// [`quiet_caught_panics`]).
    static CAUGHT_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns a panic in it as `Err` with the panic's message (and, with the hook of
/// [`quiet_caught_panics`], where it happened: a panic in Lockstep's own code stays
/// traceable). Third-party decoders (parquet-rs, arrow-ipc) panic on some corrupt bytes instead
/// of returning an error; their callers turn this `Err` into an error naming the file. While
/// `f` runs, a panic on this thread is an expected outcome, which that hook does not print.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    struct Catching;
    impl Drop for Catching {
        fn drop(&mut self) {
            CATCHING.with(|c| c.set(c.get().saturating_sub(1)));
        }
    }
    CATCHING.with(|c| c.set(c.get() + 1));
    let _catching = Catching;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        match CAUGHT_AT.with(|at| at.borrow_mut().take()) {
            Some(at) => format!("{message} (at {at})"),
            None => message,
        }
    })
}

/// Installs a panic hook that leaves panics caught by [`catch_panic`] to the error they become
/// (with their location in its message; logged at `debug` level) and passes every other panic
/// to the hook that was installed before. Without it, the default hook prints a caught panic
/// and its backtrace to stderr before the caller reports a clean error. For binaries; call
/// once.
pub fn quiet_caught_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.with(|c| c.get()) > 0 {
            tracing::debug!(panic = %info, "caught a panic in a decoder");
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
            CAUGHT_AT.with(|slot| *slot.borrow_mut() = at);
        } else {
            previous(info);
        }
    }));
}

/// Runs the decoding of `part` of `path` (its footer, a row group), turning a panic of
/// parquet-rs or arrow on corrupt bytes into the file's `DataFileInvalid`.
fn without_panics<T>(
    path: &std::path::Path,
    part: impl std::fmt::Display,
    read: impl FnOnce() -> crate::error::Result<T>,
) -> crate::error::Result<T> {
    catch_panic(read).unwrap_or_else(|panic| {
        Err(crate::error::Error::DataFileInvalid {
            path: path.to_path_buf(),
            reason: format!("{part}: decoding failed on corrupt data: {panic}"),
        })
    })
}

/// Rows per Parquet row group; row groups are the unit of pruning by series and time.
pub const ROW_GROUP_ROWS: usize = 256 * 1024;

/// Column names of data files.
pub mod columns {
    /// Series id.
    pub const SERIES: &str = "series_id";
    /// Local (raw) timestamp, ns.
    pub const TIME: &str = "time";
    /// Integer mantissa of decimal values.
    pub const VALUE_INT: &str = "value_int";
    /// Decimal scale of `value_int`.
    pub const VALUE_SCALE: &str = "value_scale";
    /// Values that are not short decimals.
    pub const VALUE_FLOAT: &str = "value_float";
}

/// The Arrow schema of data files.
pub fn file_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(columns::SERIES, DataType::UInt32, false),
        Field::new(columns::TIME, DataType::Int64, true),
        Field::new(columns::VALUE_INT, DataType::Int64, true),
        Field::new(columns::VALUE_SCALE, DataType::Int8, true),
        Field::new(columns::VALUE_FLOAT, DataType::Float64, true),
    ]))
}

/// Facts about a written data file, recorded in the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStats {
    /// Rows in the file.
    pub rows: u64,
    /// Size on disk.
    pub bytes: u64,
    /// Smallest and largest local timestamp.
    pub min_time: i64,
    /// Largest local timestamp.
    pub max_time: i64,
    /// Smallest series id.
    pub min_series: u32,
    /// Largest series id.
    pub max_series: u32,
    /// CRC-32 of the file's footer (the Parquet metadata and the 8-byte tail), checked when
    /// the footer is read (`datafile/checksum.rs`); `None` for files written before it was
    /// recorded, and absent from their manifest entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer_crc32: Option<u32>,
}

/// Knobs for writing data files.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// zstd level (1..=22).
    pub zstd_level: i32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { zstd_level: 3 }
    }
}

/// Which rows to read.
#[derive(Debug, Clone, Default)]
pub struct RowFilter<'a> {
    /// Inclusive lower and exclusive upper bound on local time.
    pub time: Option<(i64, i64)>,
    /// Allowed series (`None` = all).
    pub series: Option<&'a RoaringBitmap>,
    /// Wanted values (`None` = all): a pruning hint, not a filter. A reader may skip the runs
    /// of a series whose recorded value range lies outside (`datafile/valuestats.rs`); rows
    /// outside it may still be returned, rows inside never dropped. Readers that merge
    /// overlapping sources must not pass it down (a newer value outside the range overrides
    /// an older one inside).
    pub value: Option<ValueRange>,
}

impl RowFilter<'_> {
    /// Whether a row passes.
    #[inline]
    pub fn matches(&self, series: u32, time: i64) -> bool {
        self.time.is_none_or(|(lo, hi)| time >= lo && time < hi) && self.series.is_none_or(|s| s.contains(series))
    }
}

#[cfg(test)]
mod tests;
