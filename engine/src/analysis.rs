//! Pure numerical analysis of time series: lag correlation and change points.
//!
//! Used by the SQL functions in `lockstep-query` (`lag_corr`, `onset`, `change_points`) and by
//! the diagnosis directly. No I/O, no threads, deterministic (fixed seeds).
//!
//! - [`grid`]: places `(time, x, y)` rows on a regular grid.
//! - [`xcorr`]: cross-correlation by FFT or directly.
//! - [`lag_corr`]: best lag, coefficient and surrogate significance.
//! - [`ranks`]: normal scores (rank Gaussianisation).
//! - [`pelt`]: PELT over a segment cost; the Gaussian mean-and-variance cost.
//! - [`linear_cost`]: the piecewise-linear Gaussian segment cost.
//! - [`robust`]: robust scale, winsorisation and lag-1 autocorrelation.
//! - [`change_points`]: change points (level, slope, spread) and onset.
//! - [`interrupt`]: the flag that ends a cancelled statement's analyses early.

pub mod change_points;
pub mod grid;
pub mod interrupt;
pub mod lag_corr;
pub mod linear_cost;
pub mod pelt;
pub mod ranks;
pub mod rng;
pub mod robust;
pub mod xcorr;

pub use change_points::{ChangeConfig, ChangeDetector, ChangeKind, ChangeModel, ChangePoint, TimedChange};
pub use grid::{Grid, snap_pairs};
pub use interrupt::Stop;
pub use lag_corr::{LagCorr, LagCorrConfig, LagCorrelator, NullModel, XcorrMethod};
