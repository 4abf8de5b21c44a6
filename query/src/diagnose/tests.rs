//! The diagnosis reads a series exactly as SQL does: the same corrected times as the `samples`
//! table's `time` column and the same counter rates as `normalized_rate` (wrap, reset,
//! saturation, unit scale) over the host's own sampling intervals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, TimestampNanosecondType};
use lockstep_engine::clock::OffsetObservation;
use lockstep_engine::model::{SEC, SeriesKey, SeriesSamples};
use lockstep_engine::{Store, StoreConfig, WriteBatch};

use super::context::JobContext;
use super::load::{derive, scan};
use super::{ClockMode, DiagnoseOptions};
use crate::samples::read::SeriesClocks;
use crate::session::QueryEngine;

/// 2026-03-02T09:00:00Z.
const T0: i64 = 1_772_442_000 * SEC;
const MINUTES: i64 = 10;
/// mlx5 queue counter: 32 bits, wraps.
const WRAPS: &str = "node_infiniband_out_of_sequence_packets_received_total";
/// PMA PortCounters field: 16 bits, saturates.
const SATURATES: &str = "node_infiniband_symbol_error_total";
/// A gauge (no counter rule).
const GAUGE: &str = "node_infiniband_rate_bytes_per_second";

/// Two nodes on one leaf (so that their NIC ports are the job's), and host `n1`'s readings (irregular intervals of 1–3 s) of a counter that wraps at 2^32 and is
/// reset once, a counter that saturates at 2^16 − 1, and a gauge; its clock runs 2.5 s ahead
/// of the reference and drifts by 40 ms over the run.
fn store(dir: &std::path::Path) -> Arc<Store> {
    let store = Store::open(dir, StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    store
        .write_document(
            "topology.json",
            r#"{"nodes":[
                {"name":"n1","gpus":1,"nics":[{"device":"mlx5_0","port":1,"fabric":"infiniband","switch":"lf0","switch_port":1}]},
                {"name":"n2","gpus":1,"nics":[{"device":"mlx5_0","port":1,"fabric":"infiniband","switch":"lf0","switch_port":2}]}],
                "switches":[{"name":"lf0","tier":"leaf"}]}"#,
        )
        .unwrap();
    let end = T0 + MINUTES * 60 * SEC;
    store
        .write_document("jobs.json", &format!(r#"[{{"job":"j","nodes":["n1","n2"],"start":{T0},"end":{end}}}]"#))
        .unwrap();
    let mut times = Vec::new();
    let mut t = T0 - 30 * SEC;
    while t < end + 30 * SEC {
        times.push(t);
        t += SEC * (1 + (times.len() as i64 % 3)) + 1_234_567;
    }
    let n = times.len();
    let wrap = 2f64.powi(32);
    let wraps: Vec<f64> = (0..n)
        .map(|i| match i {
            // A reset two thirds in: the counter restarts from a small value.
            _ if i >= 2 * n / 3 => 10.0 + 700.0 * (i - 2 * n / 3) as f64,
            _ => (wrap - 40_000.0 + 900.0 * i as f64) % wrap,
        })
        .collect();
    let saturates: Vec<f64> = (0..n).map(|i| (60_000.0 + 37.0 * i as f64).min(65_535.0)).collect();
    let gauge: Vec<f64> = (0..n).map(|i| 25e9 + (i % 7) as f64).collect();
    let labels = [("host", "n1"), ("device", "mlx5_0"), ("port", "1")];
    let series = [(WRAPS, wraps), (SATURATES, saturates), (GAUGE, gauge)]
        .into_iter()
        .map(|(m, values)| (SeriesKey::new(m, labels), SeriesSamples { timestamps: times.clone(), values }))
        .collect();
    store.write(&WriteBatch { series }).unwrap();
    store.flush().unwrap();
    store
        .with_clocks(|reg| {
            let offsets: Vec<OffsetObservation> = (0..=2 * MINUTES + 4)
                .map(|k| OffsetObservation {
                    host: "n1".into(),
                    local_time: T0 - 60 * SEC + k * 30 * SEC,
                    offset_ns: 2_500_000_000 + k * 1_700_000,
                    uncertainty_ns: 1_000,
                })
                .collect();
            reg.add_offsets(&offsets)?;
            reg.refit()
        })
        .unwrap();
    Arc::new(store)
}

/// `(time, value)` rows of a query with a Timestamp and a Float64 column, NULL values skipped.
async fn rows(session: &QueryEngine, sql: &str) -> Vec<(i64, f64)> {
    let batches = session.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        let t = b.column(0).as_primitive::<TimestampNanosecondType>();
        let v = b.column(1).as_primitive::<Float64Type>();
        out.extend((0..b.num_rows()).filter(|&i| v.is_valid(i)).map(|i| (t.value(i), v.value(i))));
    }
    out
}

#[tokio::test]
async fn derived_signals_equal_the_sql_time_column_and_counter_rates() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let opts = DiagnoseOptions { clock: ClockMode::Corrected, ..Default::default() };
    let ctx = JobContext::load(&store, "j", &opts).unwrap();
    let models = SeriesClocks::for_store(&store, store.clock_models().unwrap()).unwrap();
    let parts = scan(&store, &models, (ctx.from, ctx.to), ctx.series.iter().map(|m| m.id), 2).unwrap();
    let session = QueryEngine::new(store.clone()).unwrap();
    let mut seen = 0;
    for metric in [WRAPS, SATURATES, GAUGE] {
        let meta = ctx.series.iter().find(|m| m.metric() == metric).unwrap_or_else(|| {
            panic!("{metric} not among {:?}", ctx.series.iter().map(|m| (m.metric(), &m.entity)).collect::<Vec<_>>())
        });
        let s = derive(meta, &parts, models.model(meta.id), ctx.from, ctx.to);
        let value = if meta.is_counter() {
            "normalized_rate(local_time, value, metric) OVER (PARTITION BY series_id ORDER BY local_time \
             ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)"
        } else {
            "value"
        };
        // The rate is taken over every sample (the first one in the window has one before it),
        // then the window is cut.
        let sql = format!(
            "SELECT time, r FROM (SELECT time, {value} AS r FROM samples WHERE metric = '{metric}') \
             WHERE time >= to_timestamp_nanos({}) AND time < to_timestamp_nanos({}) ORDER BY time",
            ctx.from, ctx.to
        );
        let expected = rows(&session, &sql).await;
        let derived: Vec<(i64, f64)> = s.t.iter().copied().zip(s.v.iter().copied()).collect();
        assert!(derived.len() > 100, "{metric}: {} samples", derived.len());
        assert_eq!(derived.len(), expected.len(), "{metric}");
        for (d, e) in derived.iter().zip(&expected) {
            assert!(d.0 == e.0 && d.1.to_bits() == e.1.to_bits(), "{metric}: diagnosis {d:?}, SQL {e:?}");
        }
        seen += 1;
    }
    assert_eq!(seen, 3);

    // The cases are exercised: corrected times differ from the local ones, the wrap and the reset
    // give ordinary rates (no negative or 2^32-sized one), the saturated stretch gives none.
    let meta = |m: &str| ctx.series.iter().find(|s| s.metric() == m).unwrap();
    let wraps = derive(meta(WRAPS), &parts, models.model(meta(WRAPS).id), ctx.from, ctx.to);
    assert!(wraps.v.iter().all(|&r| (0.0..=1_000.0).contains(&r)), "{:?}", wraps.v);
    let local = rows(&session, &format!("SELECT local_time, value FROM samples WHERE metric = '{GAUGE}'")).await;
    let gauge = derive(meta(GAUGE), &parts, models.model(meta(GAUGE).id), ctx.from, ctx.to);
    assert!(!local.iter().any(|&(t, _)| gauge.t.contains(&t)), "every time is corrected");
    let saturated = derive(meta(SATURATES), &parts, models.model(meta(SATURATES).id), ctx.from, ctx.to);
    assert!(saturated.t.len() < gauge.t.len() / 2, "no rate once saturated");
}

#[test]
fn gridding_takes_the_median_per_slot_and_drops_samples_outside() {
    use super::load::{Grid, to_grid};
    use super::signal::Signal;
    let grid = Grid { start: 1_000, step: 10, slots: 5 };
    let mut s = Signal::default();
    let samples = [
        (990, 1.0),
        (1_000, 2.0),
        (1_005, 4.0),
        (1_009, 3.0),
        (1_010, 5.0),
        (1_031, 7.0),
        (1_039, 8.0),
        (1_040, 9.0),
        (1_049, 1.0),
        (1_050, 6.0),
        (1_100, 0.0),
    ];
    for (t, v) in samples {
        s.t.push(t);
        s.v.push(v);
    }
    let g = to_grid(&s, &grid);
    assert_eq!(g.len(), 5);
    assert_eq!([g[0], g[1], g[3], g[4]], [3.0, 5.0, 7.5, 5.0]);
    assert!(g[2].is_nan(), "a slot without samples");
}

/// The calibrated confidence is a monotone map of the rule's score into [0, 1]: a higher rule
/// score never gets a lower probability, a fallback verdict (rule score 0.3) gets less than a
/// strong one, a contested verdict no more than an uncontested one, a healthy verdict no more
/// the larger its near miss, and out-of-range and non-finite inputs stay in [0, 1].
#[test]
fn calibrated_confidence_is_monotone_and_a_probability() {
    use super::verdict::calibration::{VerdictKind, calibrated};
    let mut previous = f64::NEG_INFINITY;
    let mut previous_healthy = f64::INFINITY;
    for i in 0..=1000 {
        let rule = f64::from(i) / 1000.0;
        let p = calibrated(VerdictKind::Episode { contested: false }, rule);
        assert!((0.0..=1.0).contains(&p), "{rule} -> {p}");
        assert!(p >= previous, "not monotone at {rule}: {p} < {previous}");
        assert!(
            calibrated(VerdictKind::Episode { contested: true }, rule) <= p,
            "contested above uncontested at {rule}"
        );
        previous = p;
        let h = calibrated(VerdictKind::Healthy { rise: rule / 4.0 }, 0.9);
        assert!(h <= previous_healthy, "healthy not non-increasing at rise {}: {h}", rule / 4.0);
        previous_healthy = h;
    }
    let fallback = calibrated(VerdictKind::Episode { contested: false }, 0.3);
    let strong = calibrated(VerdictKind::Episode { contested: false }, 0.95);
    assert!(fallback < strong, "fallback {fallback} vs strong {strong}");
    for odd in [-1.0, 2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for kind in [
            VerdictKind::Episode { contested: false },
            VerdictKind::Episode { contested: true },
            VerdictKind::Healthy { rise: odd },
            VerdictKind::Other,
        ] {
            let p = calibrated(kind, odd);
            assert!((0.0..=1.0).contains(&p), "{kind:?} {odd} -> {p}");
        }
    }
}
