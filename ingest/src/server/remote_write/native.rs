//! Native histograms and remote write 2.0.
//!
//! * A native (sparse, exponential) histogram sample — in a 1.0 `TimeSeries.histograms` or a
//!   2.0 one — becomes the same series as an OTLP exponential histogram: `<name>_bucket{le}`
//!   cumulative counts (the bounds `2^(i·2^-schema)`, the zero bucket at `le` = its threshold,
//!   `le="+Inf"` = count), `<name>_count` and `<name>_sum`. Prometheus' schema is OTLP's
//!   scale, and its bucket `i` (upper bound `base^i`) is OTLP's bucket `i - 1`.
//!   Integer histograms carry delta-coded counts, float histograms absolute ones; float counts
//!   must be whole numbers. Custom-bucket histograms (schema −53) are refused.
//! * A 2.0 `io.prometheus.write.v2.Request` (labels as references into a symbol table) is
//!   resolved into the 1.0 shape, so both go through one conversion. Exemplars, metadata and
//!   created timestamps are not stored.

use opentelemetry_proto::tonic::metrics::v1::ExponentialHistogramDataPoint;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use tonic::Status;

use super::{PromLabel, PromSample, PromTimeSeries, PromWriteRequest};

/// Most buckets one native histogram may span (from its lowest to its highest index).
const MAX_SPAN: i64 = 4096;
/// The schema of custom-bucket native histograms (explicit bounds in `custom_values`).
const CUSTOM_BUCKETS_SCHEMA: i32 = -53;

/// A span of populated buckets: `offset` from the end of the previous span (or from index 0
/// for the first), then `length` consecutive buckets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    /// Gap to the previous span.
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Consecutive buckets.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `prometheus.Histogram` / `io.prometheus.write.v2.Histogram` (the same field numbers).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromHistogram {
    /// Observations (integer histogram).
    #[prost(uint64, optional, tag = "1")]
    pub count_int: Option<u64>,
    /// Observations (float histogram).
    #[prost(double, optional, tag = "2")]
    pub count_float: Option<f64>,
    /// Sum of observations.
    #[prost(double, tag = "3")]
    pub sum: f64,
    /// Resolution: bucket bounds are powers of `2^(2^-schema)`.
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    /// Width of the zero bucket.
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    /// Observations in the zero bucket (integer histogram).
    #[prost(uint64, optional, tag = "6")]
    pub zero_count_int: Option<u64>,
    /// Observations in the zero bucket (float histogram).
    #[prost(double, optional, tag = "7")]
    pub zero_count_float: Option<f64>,
    /// Negative buckets' spans.
    #[prost(message, repeated, tag = "8")]
    pub negative_spans: Vec<BucketSpan>,
    /// Negative buckets' counts, delta-coded (integer histogram).
    #[prost(sint64, repeated, tag = "9")]
    pub negative_deltas: Vec<i64>,
    /// Negative buckets' counts (float histogram).
    #[prost(double, repeated, tag = "10")]
    pub negative_counts: Vec<f64>,
    /// Positive buckets' spans.
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    /// Positive buckets' counts, delta-coded (integer histogram).
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    /// Positive buckets' counts (float histogram).
    #[prost(double, repeated, tag = "13")]
    pub positive_counts: Vec<f64>,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
}

fn whole(v: f64, what: &str) -> Result<u64, String> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(63) {
        Ok(v as u64)
    } else {
        Err(format!("{what} {v} is not a whole non-negative count"))
    }
}

/// The populated buckets of one side as (lowest Prometheus index, dense counts).
fn side(spans: &[BucketSpan], deltas: &[i64], floats: &[f64], integer: bool) -> Result<(i64, Vec<u64>), String> {
    let mut indexed: Vec<(i64, u64)> = Vec::new();
    let mut index = 0i64;
    let mut k = 0usize;
    let mut previous = 0i64;
    for (n, span) in spans.iter().enumerate() {
        index = if n == 0 { i64::from(span.offset) } else { index + i64::from(span.offset) };
        for _ in 0..span.length {
            let count = if integer {
                let d = *deltas.get(k).ok_or("fewer bucket deltas than the spans declare")?;
                previous = previous.checked_add(d).ok_or("bucket count overflows")?;
                u64::try_from(previous).map_err(|_| format!("bucket count {previous} is negative"))?
            } else {
                whole(*floats.get(k).ok_or("fewer bucket counts than the spans declare")?, "bucket count")?
            };
            indexed.push((index, count));
            index += 1;
            k += 1;
        }
    }
    let declared = if integer { deltas.len() } else { floats.len() };
    if k != declared {
        return Err(format!("{declared} bucket counts for {k} buckets in the spans"));
    }
    let (Some(&(lo, _)), Some(&(hi, _))) = (indexed.first(), indexed.last()) else { return Ok((0, Vec::new())) };
    if hi - lo >= MAX_SPAN || indexed.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Err(format!("buckets span indexes {lo}..={hi} (limit {MAX_SPAN}, increasing)"));
    }
    let mut dense = vec![0u64; (hi - lo + 1) as usize];
    for (i, c) in indexed {
        dense[(i - lo) as usize] = c;
    }
    Ok((lo, dense))
}

/// A native histogram sample as the equivalent OTLP exponential histogram data point.
pub(crate) fn to_exponential(h: &PromHistogram) -> Result<ExponentialHistogramDataPoint, String> {
    if h.schema == CUSTOM_BUCKETS_SCHEMA {
        return Err("custom-bucket native histograms (schema -53) are not supported".to_string());
    }
    let integer = h.count_float.is_none() && h.zero_count_float.is_none();
    let count = match (h.count_int, h.count_float) {
        (_, Some(f)) => whole(f, "count")?,
        (Some(c), None) => c,
        (None, None) => 0,
    };
    let zero_count = match (h.zero_count_int, h.zero_count_float) {
        (_, Some(f)) => whole(f, "zero count")?,
        (Some(c), None) => c,
        (None, None) => 0,
    };
    let (pos_lo, positive) = side(&h.positive_spans, &h.positive_deltas, &h.positive_counts, integer)?;
    let (neg_lo, negative) = side(&h.negative_spans, &h.negative_deltas, &h.negative_counts, integer)?;
    // Prometheus bucket i is (base^(i-1), base^i]; OTLP bucket i is (base^i, base^(i+1)].
    let offset = |lo: i64| i32::try_from(lo - 1).map_err(|_| format!("bucket index {lo} out of range"));
    Ok(ExponentialHistogramDataPoint {
        count,
        sum: Some(h.sum),
        scale: h.schema,
        zero_count,
        zero_threshold: h.zero_threshold,
        positive: Some(Buckets { offset: offset(pos_lo)?, bucket_counts: positive }),
        negative: Some(Buckets { offset: offset(neg_lo)?, bucket_counts: negative }),
        ..Default::default()
    })
}

/// `io.prometheus.write.v2.Request`: fields 4 and 5; 1 to 3 are reserved by the spec, so that
/// a 1.0 `prometheus.WriteRequest` (`timeseries = 1`, `metadata = 3`) decodes as an empty
/// request (refused by [`from_v2`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct V2Request {
    /// Interned strings; `symbols[0]` is the empty string.
    #[prost(bytes = "bytes", repeated, tag = "4")]
    pub symbols: Vec<hyper::body::Bytes>,
    /// Series.
    #[prost(message, repeated, tag = "5")]
    pub timeseries: Vec<V2TimeSeries>,
}

/// `io.prometheus.write.v2.TimeSeries` (exemplars, metadata and created timestamp skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct V2TimeSeries {
    /// Label name/value pairs as indexes into `symbols`.
    #[prost(uint32, repeated, tag = "1")]
    pub labels_refs: Vec<u32>,
    /// Float samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<PromSample>,
    /// Native histogram samples.
    #[prost(message, repeated, tag = "3")]
    pub histograms: Vec<PromHistogram>,
}

/// Resolves a 2.0 request's symbol references into the 1.0 shape; a reference outside the
/// symbol table or an odd number of references is an error naming the series. A non-empty
/// body (`body_len` bytes) without symbols or series is refused: it is not a 2.0 message (a
/// 1.0 `prometheus.WriteRequest` sent with the 2.0 content type decodes so), and answering
/// success would drop its samples.
pub(crate) fn from_v2(req: V2Request, body_len: usize) -> Result<PromWriteRequest, Status> {
    if body_len > 0 && req.symbols.is_empty() && req.timeseries.is_empty() {
        return Err(Status::invalid_argument(format!(
            "body of {body_len} bytes has no symbols (field 4) and no timeseries (field 5) of an \
             io.prometheus.write.v2.Request; a prometheus.WriteRequest (1.0) must be sent with \
             proto=prometheus.WriteRequest"
        )));
    }
    let symbols = req.symbols;
    let mut timeseries = Vec::with_capacity(req.timeseries.len());
    for (n, ts) in req.timeseries.into_iter().enumerate() {
        if ts.labels_refs.len() % 2 != 0 {
            return Err(Status::invalid_argument(format!(
                "timeseries {n}: {} labels_refs (must be name/value pairs)",
                ts.labels_refs.len()
            )));
        }
        let symbol = |r: u32| {
            symbols.get(r as usize).cloned().ok_or_else(|| {
                Status::invalid_argument(format!(
                    "timeseries {n}: symbol reference {r} outside the table of {} symbols",
                    symbols.len()
                ))
            })
        };
        let labels = ts
            .labels_refs
            .chunks_exact(2)
            .map(|p| Ok(PromLabel { name: symbol(p[0])?, value: symbol(p[1])? }))
            .collect::<Result<Vec<_>, Status>>()?;
        timeseries.push(PromTimeSeries { labels, samples: ts.samples, histograms: ts.histograms });
    }
    Ok(PromWriteRequest { timeseries })
}
