//! The data model: series keys, samples and write batches.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Dense numeric id of a series, assigned by the [`crate::series::SeriesCatalog`].
pub type SeriesId = u32;

/// The label every series must carry: the host whose clock stamped its samples.
pub const HOST_LABEL: &str = "host";

/// Label keys that cannot be used because they collide with `samples` table columns.
pub const RESERVED_LABELS: &[&str] =
    &["time", "local_time", "time_uncertainty", "metric", "value", "series_id", "domain", "entity"];

/// Timestamps must lie in `[MIN_TIME_NS, MAX_TIME_NS]`: 1970-01-01 to 2262-04-11 minus a day,
/// so that clock corrections of up to a day never overflow `i64`.
pub const MIN_TIME_NS: i64 = 0;
/// Upper bound of accepted timestamps (see [`MIN_TIME_NS`]).
pub const MAX_TIME_NS: i64 = i64::MAX - 86_400_000_000_000;

/// A metric name plus labels. Labels are kept sorted by key; `host` is required.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeriesKey {
    /// Metric name, e.g. `DCGM_FI_DEV_GPU_UTIL`.
    pub metric: String,
    /// Label key → value. Empty values are not stored (absent = empty).
    pub labels: BTreeMap<String, String>,
}

impl SeriesKey {
    /// Builds a key from a metric and label pairs, dropping empty label values.
    pub fn new<K, V>(metric: impl Into<String>, labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        SeriesKey { metric: metric.into(), labels }
    }

    /// The `host` label.
    pub fn host(&self) -> Option<&str> {
        self.labels.get(HOST_LABEL).map(String::as_str)
    }

    /// Checks the key: non-empty metric, a `host` label, no reserved or empty label keys.
    pub fn validate(&self) -> Result<()> {
        if self.metric.is_empty() {
            return Err(Error::InvalidSeries { reason: "metric name is empty".into() });
        }
        if self.host().is_none() {
            return Err(Error::MissingHost { metric: self.metric.clone() });
        }
        for key in self.labels.keys() {
            if key.is_empty() {
                return Err(Error::InvalidSeries {
                    reason: format!("series {self} has an empty label key"),
                });
            }
            if RESERVED_LABELS.contains(&key.as_str()) {
                return Err(Error::InvalidSeries {
                    reason: format!("label key {key:?} is reserved (series {self})"),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{{", self.metric)?;
        for (i, (k, v)) in self.labels.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        write!(f, "}}")
    }
}

/// Samples of one series in a write: parallel timestamp and value columns.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesSamples {
    /// Local timestamps, ns since the Unix epoch in the clock of the series' host.
    pub timestamps: Vec<i64>,
    /// Values (NaN and ±inf are allowed and stored as given).
    pub values: Vec<f64>,
}

/// A columnar write: samples grouped by series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteBatch {
    /// Series and their samples. A series may appear more than once.
    pub series: Vec<(SeriesKey, SeriesSamples)>,
}

impl WriteBatch {
    /// Total number of samples.
    pub fn len(&self) -> usize {
        self.series.iter().map(|(_, s)| s.timestamps.len()).sum()
    }

    /// Whether the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds one sample.
    pub fn push(&mut self, key: SeriesKey, time: i64, value: f64) {
        if let Some((k, s)) = self.series.last_mut()
            && *k == key
        {
            s.timestamps.push(time);
            s.values.push(value);
            return;
        }
        self.series.push((key, SeriesSamples { timestamps: vec![time], values: vec![value] }));
    }
}

/// Checks that a timestamp lies in the accepted range.
pub fn validate_time(series: &SeriesKey, time: i64) -> Result<()> {
    if !(MIN_TIME_NS..=MAX_TIME_NS).contains(&time) {
        return Err(Error::InvalidSample {
            series: series.to_string(),
            reason: format!("timestamp {time} ns is outside [{MIN_TIME_NS}, {MAX_TIME_NS}]"),
        });
    }
    Ok(())
}
