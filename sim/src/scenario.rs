//! The named fault scenarios the simulator can inject, with their kebab-case names.

use std::fmt;
use std::str::FromStr;

use super::SimError;

/// A fault scenario: what goes wrong (if anything) in the middle third of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// No fault: the control run (natural noise, periodic checkpoints, red-herring counters).
    Healthy,
    /// A degrading InfiniBand cable on one host NIC port: symbol and receive errors, link
    /// recoveries, transport retransmits, slower collectives, idle GPUs, longer steps.
    IbLinkErrors,
    /// A slow receiver on a RoCE fabric (NIC PCIe link trained down): out-of-buffer drops, PFC
    /// back-pressure, ECN marks and CNPs, DCQCN rate cuts, slower collectives.
    RoceCongestion,
    /// A degraded storage server in the shared pool: read latency and queue depth rise, data
    /// loading slows, GPUs starve.
    StorageLatency,
    /// Another job on the same storage pool writes checkpoints back to back: pool saturation,
    /// read latency rises, data loading of the main job slows.
    CheckpointStorm,
    /// CPU contention on one node starves one rank's data loader; every other rank waits for it
    /// in the collective.
    DataloaderStarvation,
    /// A GPU with failing cooling heats up and throttles its clocks; every other rank waits for
    /// it in the collective.
    ThermalThrottle,
    /// A bad link between a spine and the storage leaf: a network fault that shows up as storage
    /// tail latency and slow data loading, while the training collectives stay healthy.
    StorageOverFabric,
}

impl Scenario {
    /// Every scenario, in a stable order.
    pub const ALL: [Scenario; 8] = [
        Scenario::Healthy,
        Scenario::IbLinkErrors,
        Scenario::RoceCongestion,
        Scenario::StorageLatency,
        Scenario::CheckpointStorm,
        Scenario::DataloaderStarvation,
        Scenario::ThermalThrottle,
        Scenario::StorageOverFabric,
    ];

    /// The kebab-case name used on the command line and in `truth.json`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::IbLinkErrors => "ib-link-errors",
            Scenario::RoceCongestion => "roce-congestion",
            Scenario::StorageLatency => "storage-latency",
            Scenario::CheckpointStorm => "checkpoint-storm",
            Scenario::DataloaderStarvation => "dataloader-starvation",
            Scenario::ThermalThrottle => "thermal-throttle",
            Scenario::StorageOverFabric => "storage-over-fabric",
        }
    }

    /// The domain of the root cause (`none` for the healthy run).
    pub fn fault_domain(self) -> &'static str {
        match self {
            Scenario::Healthy => "none",
            Scenario::IbLinkErrors | Scenario::RoceCongestion | Scenario::StorageOverFabric => "network",
            Scenario::StorageLatency | Scenario::CheckpointStorm => "storage",
            Scenario::DataloaderStarvation => "data_loading",
            Scenario::ThermalThrottle => "compute",
        }
    }

    /// What the job waits on once the fault bites (`none` for the healthy run). This differs
    /// from [`Scenario::fault_domain`] only for storage over the fabric: the job waits on storage,
    /// the root cause is in the network.
    pub fn bottleneck(self) -> &'static str {
        match self {
            Scenario::StorageOverFabric => "storage",
            other => other.fault_domain(),
        }
    }

    /// Whether the compute fabric is RoCE (otherwise InfiniBand).
    pub fn uses_roce(self) -> bool {
        self == Scenario::RoceCongestion
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Scenario::ALL.into_iter().find(|sc| sc.name() == wanted).ok_or_else(|| SimError::UnknownScenario {
            name: s.to_string(),
            known: Scenario::ALL.iter().map(|sc| sc.name()).collect::<Vec<_>>().join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for sc in Scenario::ALL {
            assert_eq!(sc.name().parse::<Scenario>().ok(), Some(sc));
            assert_eq!(sc.to_string(), sc.name());
        }
        assert_eq!("IB_LINK_ERRORS".parse::<Scenario>().ok(), Some(Scenario::IbLinkErrors));
        let err = "bogus".parse::<Scenario>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("bogus") && err.contains("thermal-throttle"), "{err}");
    }
}
