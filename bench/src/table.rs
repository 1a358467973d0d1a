//! One row of the engine micro-benchmark table.

/// A measured throughput: `name` processed `bytes` per iteration,
/// `gbps` gigabytes (1e9 bytes) per second on one core.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub gbps: f64,
    /// The target this row must meet, if the issue names one (GB/s per core).
    pub target_gbps: Option<f64>,
}
