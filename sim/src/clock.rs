//! Host clocks and the NTP-style exchanges written to `clock_sync.parquet`.
//!
//! Every host (nodes, storage servers, and switches as collectors) has a clock that is off the
//! reference by up to ±2 s at the start of the run and drifts by up to ±50 ppm:
//! `local(t) = t + offset_ns + (t − epoch_ns) · drift_ppb / 10⁹`, in integer arithmetic.
//! Every 5 s each host runs one exchange with the reference: the request takes a forward delay of
//! 2 µs plus an exponential with mean 48 µs (mean 50 µs), the reply 2 µs plus an exponential with
//! mean 3 µs (mean 5 µs), so the naive offset estimate is biased by about −22.5 µs, as on a real
//! loaded network.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use super::SimError;
use super::rng::Rng;
use super::sink::writer_properties;

use lockstep_engine::model::SEC;
/// Period between two exchanges of one host.
pub(crate) const SYNC_PERIOD_NS: i64 = 5 * SEC;
const FLUSH_ROWS: usize = 65_536;

/// A host's clock relative to the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostClock {
    /// `local − reference` at `epoch_ns` (ns).
    pub(crate) offset_ns: i64,
    /// Rate error in parts per billion (positive: the host clock runs fast).
    pub(crate) drift_ppb: i64,
    /// Reference time at which `offset_ns` holds.
    pub(crate) epoch_ns: i64,
}

impl HostClock {
    /// A random clock: offset uniform in ±2 s, drift uniform in ±50 ppm.
    pub(crate) fn random(rng: &mut Rng, epoch_ns: i64) -> Self {
        let offset_ns = (rng.range(-2.0, 2.0) * SEC as f64) as i64;
        let drift_ppb = (rng.range(-50_000.0, 50_000.0)) as i64;
        Self { offset_ns, drift_ppb, epoch_ns }
    }

    /// The host's clock reading at reference time `t`.
    pub(crate) fn local(&self, t: i64) -> i64 {
        let drift = (i128::from(t - self.epoch_ns) * i128::from(self.drift_ppb)) / 1_000_000_000;
        t + self.offset_ns + drift as i64
    }
}

/// One request/reply exchange: t1 and t4 on the host clock, t2 and t3 on the reference clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exchange {
    /// Host sends (host clock).
    pub(crate) t1: i64,
    /// Reference receives (reference clock).
    pub(crate) t2: i64,
    /// Reference replies (reference clock).
    pub(crate) t3: i64,
    /// Host receives (host clock).
    pub(crate) t4: i64,
}

/// Runs one exchange that leaves the host at reference time `send`.
pub(crate) fn exchange(clock: &HostClock, send: i64, rng: &mut Rng) -> Exchange {
    let forward = 2_000 + rng.exp(48_000.0) as i64;
    let turnaround = 1_000 + rng.below(7_000) as i64;
    let reverse = 2_000 + rng.exp(3_000.0) as i64;
    let t2 = send + forward;
    let t3 = t2 + turnaround;
    Exchange { t1: clock.local(send), t2, t3, t4: clock.local(t3 + reverse) }
}

/// Schedules exchanges for every host and streams them to `clock_sync.parquet`.
pub(crate) struct ClockSync {
    next: Vec<i64>,
    rng: Rng,
    host: StringBuilder,
    cols: [Vec<i64>; 4],
    schema: SchemaRef,
    writer: ArrowWriter<File>,
    path: PathBuf,
    rows: u64,
}

impl ClockSync {
    /// Creates the file; host `h`'s first exchange is at a random phase within the first period.
    pub(crate) fn create(path: &Path, hosts: usize, start: i64, rng: Rng) -> Result<Self, SimError> {
        let mut rng = rng;
        let next = (0..hosts).map(|_| start + rng.below(SYNC_PERIOD_NS as usize) as i64).collect();
        let schema = Arc::new(Schema::new(
            std::iter::once(Field::new("host", DataType::Utf8, false))
                .chain(["t1", "t2", "t3", "t4"].into_iter().map(|n| Field::new(n, DataType::Int64, false)))
                .collect::<Vec<_>>(),
        ));
        let file = File::create(path).map_err(|source| SimError::Io { path: path.to_path_buf(), source })?;
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(writer_properties()))
            .map_err(|source| SimError::Parquet { path: path.to_path_buf(), source })?;
        Ok(Self {
            next,
            rng,
            host: StringBuilder::new(),
            cols: Default::default(),
            schema,
            writer,
            path: path.to_path_buf(),
            rows: 0,
        })
    }

    /// Runs every exchange that starts before `until`.
    pub(crate) fn advance(&mut self, until: i64, hosts: &[String], clocks: &[HostClock]) -> Result<(), SimError> {
        for (h, name) in hosts.iter().enumerate() {
            while self.next[h] < until {
                let ex = exchange(&clocks[h], self.next[h], &mut self.rng);
                self.host.append_value(name);
                for (col, v) in self.cols.iter_mut().zip([ex.t1, ex.t2, ex.t3, ex.t4]) {
                    col.push(v);
                }
                self.next[h] += SYNC_PERIOD_NS + self.rng.range(-20e6, 20e6) as i64;
            }
        }
        if self.cols[0].len() >= FLUSH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SimError> {
        let n = self.cols[0].len();
        if n == 0 {
            return Ok(());
        }
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(self.host.finish())];
        for col in &mut self.cols {
            arrays.push(Arc::new(Int64Array::from(std::mem::take(col))));
        }
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|source| SimError::Arrow { path: self.path.clone(), source })?;
        self.writer.write(&batch).map_err(|source| SimError::Parquet { path: self.path.clone(), source })?;
        self.rows += n as u64;
        Ok(())
    }

    /// Flushes and closes the file; returns the number of exchanges written.
    pub(crate) fn finish(mut self) -> Result<u64, SimError> {
        self.flush()?;
        self.writer.close().map_err(|source| SimError::Parquet { path: self.path.clone(), source })?;
        Ok(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_time_applies_offset_and_drift_exactly() {
        let c = HostClock { offset_ns: -1_500_000_000, drift_ppb: 40_000, epoch_ns: 1_000 * SEC };
        assert_eq!(c.local(1_000 * SEC), 1_000 * SEC - 1_500_000_000);
        // 100 s later a 40 ppm fast clock has gained 4 ms.
        assert_eq!(c.local(1_100 * SEC), 1_100 * SEC - 1_500_000_000 + 4_000_000);
    }

    #[test]
    fn exchange_offset_estimate_is_close_and_biased_by_the_asymmetry() {
        let c = HostClock { offset_ns: 700_000_000, drift_ppb: -20_000, epoch_ns: 0 };
        let mut rng = Rng::new(3);
        let mut est: Vec<i64> = (0..2000)
            .map(|i| {
                let e = exchange(&c, 10 * SEC + i * SYNC_PERIOD_NS, &mut rng);
                assert!(e.t2 < e.t3);
                ((e.t1 - e.t2) + (e.t4 - e.t3)) / 2
                    - (c.local(10 * SEC + i * SYNC_PERIOD_NS) - (10 * SEC + i * SYNC_PERIOD_NS))
            })
            .collect();
        est.sort_unstable();
        let median = est[est.len() / 2];
        // Forward delay is larger, so the estimate is pulled negative by ~(50-5)/2 µs.
        assert!((-40_000..-5_000).contains(&median), "median error {median} ns");
    }
}
