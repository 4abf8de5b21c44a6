//! Decoding of the GPU clock throttle reasons bitmask.
//!
//! `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` (renamed `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` in newer
//! DCGM) exports NVML's `nvmlClocksThrottleReasons` bitmask as a gauge. The bits:
//!
//! | bit | value | reason |
//! |---|---|---|
//! | 0 | 0x1 | GPU idle |
//! | 1 | 0x2 | applications clocks setting |
//! | 2 | 0x4 | software power cap |
//! | 3 | 0x8 | hardware slowdown (thermal or power brake, reported by the board) |
//! | 4 | 0x10 | sync boost |
//! | 5 | 0x20 | software thermal slowdown |
//! | 6 | 0x40 | hardware thermal slowdown |
//! | 7 | 0x80 | hardware power brake slowdown |
//! | 8 | 0x100 | display clock setting |

use std::fmt;

/// A decoded clock throttle reasons bitmask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThrottleReasons(pub u64);

/// Names of the known bits, in bit order.
pub const REASON_NAMES: [(u64, &str); 9] = [
    (ThrottleReasons::GPU_IDLE, "gpu_idle"),
    (ThrottleReasons::APPLICATIONS_CLOCKS, "applications_clocks_setting"),
    (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
    (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
    (ThrottleReasons::SYNC_BOOST, "sync_boost"),
    (ThrottleReasons::SW_THERMAL, "sw_thermal_slowdown"),
    (ThrottleReasons::HW_THERMAL, "hw_thermal_slowdown"),
    (ThrottleReasons::HW_POWER_BRAKE, "hw_power_brake_slowdown"),
    (ThrottleReasons::DISPLAY_CLOCKS, "display_clock_setting"),
];

impl ThrottleReasons {
    /// GPU idle: clocks are low because there is no work (not a problem).
    pub const GPU_IDLE: u64 = 0x1;
    /// Clocks limited by the applications clocks setting.
    pub const APPLICATIONS_CLOCKS: u64 = 0x2;
    /// Software power cap (the power limit).
    pub const SW_POWER_CAP: u64 = 0x4;
    /// Hardware slowdown asserted by the board.
    pub const HW_SLOWDOWN: u64 = 0x8;
    /// Sync boost (clocks matched across GPUs).
    pub const SYNC_BOOST: u64 = 0x10;
    /// Software thermal slowdown.
    pub const SW_THERMAL: u64 = 0x20;
    /// Hardware thermal slowdown.
    pub const HW_THERMAL: u64 = 0x40;
    /// Hardware power brake slowdown (external power brake signal).
    pub const HW_POWER_BRAKE: u64 = 0x80;
    /// Display clock setting.
    pub const DISPLAY_CLOCKS: u64 = 0x100;

    /// Decodes a sample value; `None` unless it is a finite, non-negative integer below 2^53.
    pub fn from_value(value: f64) -> Option<ThrottleReasons> {
        if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value >= 9_007_199_254_740_992.0 {
            return None;
        }
        Some(ThrottleReasons(value as u64))
    }

    /// Any thermal slowdown (software or hardware).
    pub fn thermal(self) -> bool {
        self.0 & (Self::SW_THERMAL | Self::HW_THERMAL) != 0
    }

    /// Any power limitation (software power cap or hardware power brake).
    pub fn power(self) -> bool {
        self.0 & (Self::SW_POWER_CAP | Self::HW_POWER_BRAKE) != 0
    }

    /// Any hardware slowdown (board slowdown, hardware thermal or power brake).
    pub fn hw_slowdown(self) -> bool {
        self.0 & (Self::HW_SLOWDOWN | Self::HW_THERMAL | Self::HW_POWER_BRAKE) != 0
    }

    /// Clocks are held down for a reason that costs performance under load: anything except
    /// idle, applications clocks, sync boost and display clocks.
    pub fn performance_limiting(self) -> bool {
        self.thermal() || self.power() || self.hw_slowdown()
    }

    /// Names of the set bits; unknown bits appear as `bit<N>`.
    pub fn names(self) -> Vec<String> {
        let mut out: Vec<String> =
            REASON_NAMES.iter().filter(|(bit, _)| self.0 & bit != 0).map(|(_, name)| (*name).to_owned()).collect();
        let known = REASON_NAMES.iter().fold(0u64, |acc, (bit, _)| acc | bit);
        let mut unknown = self.0 & !known;
        while unknown != 0 {
            let bit = unknown.trailing_zeros();
            out.push(format!("bit{bit}"));
            unknown &= unknown - 1;
        }
        out
    }
}

impl fmt::Display for ThrottleReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(","))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn decodes_thermal_power_and_hw_slowdown() {
        let r = ThrottleReasons::from_value(32.0).unwrap();
        assert!(r.thermal() && !r.power() && !r.hw_slowdown());
        assert_eq!(r.to_string(), "sw_thermal_slowdown");

        let r = ThrottleReasons::from_value(4.0).unwrap();
        assert!(r.power() && !r.thermal());

        let r = ThrottleReasons::from_value((0x40 | 0x80) as f64).unwrap();
        assert!(r.thermal() && r.power() && r.hw_slowdown());
        assert_eq!(r.names(), vec!["hw_thermal_slowdown", "hw_power_brake_slowdown"]);

        let r = ThrottleReasons::from_value(8.0).unwrap();
        assert!(r.hw_slowdown() && r.performance_limiting());
    }

    #[test]
    fn idle_is_not_limiting_and_unknown_bits_are_named() {
        let r = ThrottleReasons::from_value(1.0).unwrap();
        assert!(!r.performance_limiting());
        assert_eq!(ThrottleReasons(0).to_string(), "none");
        assert_eq!(ThrottleReasons(0x1 | 0x400).names(), vec!["gpu_idle", "bit10"]);
    }

    #[test]
    fn rejects_non_integers() {
        for v in [f64::NAN, -1.0, 2.5, f64::INFINITY, 1e300] {
            assert!(ThrottleReasons::from_value(v).is_none(), "{v}");
        }
    }
}
