//! Cooperative interruption of long analyses: a statement that was cancelled or passed its
//! time limit has its result stream dropped, but a whole-series analysis over millions of
//! points (`lag_corr`'s surrogates, the change-point search) computes without yielding, and
//! would keep its thread busy to the end — on a server with one statement thread per core,
//! a few such statements hold up every other. The query layer runs each analysis under the
//! statement's [`Stop`] flag ([`run_with`]); the analyses' loops check [`stopped`] and end
//! early, and the caller, seeing the flag set, reports an error instead of the partial result.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Asks the analyses of one statement to stop (clones share the flag).
#[derive(Debug, Default, Clone)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the analyses running under this flag to stop.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`Stop::set`] was called.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Stop>> = const { RefCell::new(None) };
}

/// Restores the thread's previous flag when [`run_with`] returns (or unwinds).
struct Restore(Option<Stop>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Runs `f` (synchronous: it cannot move to another thread midway) with `stop` as the flag
/// the analyses it calls check with [`stopped`].
pub fn run_with<R>(stop: &Stop, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT.with(|c| c.replace(Some(stop.clone())));
    let _restore = Restore(previous);
    f()
}

/// Whether the analysis running on this thread was asked to stop; `false` outside
/// [`run_with`].
pub fn stopped() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(Stop::is_set))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{ChangeConfig, LagCorrConfig, LagCorrelator, change_points::change_points};

    /// Under a set flag the change-point search and `lag_corr`'s surrogates end early and
    /// give nothing; under a flag not set, the same calls find the step and the lag.
    #[test]
    fn analyses_under_a_set_flag_end_early_with_nothing() {
        let n = 50_000;
        let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 101) as f64 + if i > n / 2 { 400.0 } else { 0.0 }).collect();
        let y: Vec<f64> = (0..n).map(|i| x[(i + n - 3) % n]).collect();
        let (set, clear) = (Stop::new(), Stop::new());
        set.set();
        let cfg = ChangeConfig::default();
        assert!(!run_with(&clear, || change_points(&x, &cfg)).is_empty());
        assert!(run_with(&set, || change_points(&x, &cfg)).is_empty());
        // Fewer surrogates' worth of tiles than the circular null needs: phase surrogates.
        let lag = LagCorrConfig { max_lag: Some(n / 2), ..LagCorrConfig::default() };
        let found = run_with(&clear, || LagCorrelator::new().compute(&x, &y, &lag));
        assert!(found.is_some_and(|r| r.lag.abs() == 3 && r.surrogates > 0), "{found:?}");
        assert!(run_with(&set, || LagCorrelator::new().compute(&x, &y, &lag)).is_none());
    }

    #[test]
    fn the_flag_holds_inside_run_with_only_and_nests() {
        let (outer, inner) = (Stop::new(), Stop::new());
        inner.set();
        assert!(!stopped());
        run_with(&outer, || {
            assert!(!stopped());
            run_with(&inner, || assert!(stopped()));
            assert!(!stopped());
            outer.set();
            assert!(stopped());
        });
        assert!(!stopped());
    }
}
