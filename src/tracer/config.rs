//! Tracer settings that are not in IA32_RTIT_CTL: the clock, TNT size, back-pressure.

use super::clock::ClockConfig;

/// The back-pressure model behind OVF (OVF1): the trace unit's internal buffer holds
/// `buffer_bytes` and drains `drain_bytes` every `per_cycles` core cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backpressure {
    /// Internal buffer size in bytes (at least 256 is used).
    pub buffer_bytes: u32,
    /// Bytes drained per `per_cycles` cycles.
    pub drain_bytes: u32,
    /// The drain period in core cycles (at least 1).
    pub per_cycles: u32,
}

/// Tracer settings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracerConfig {
    /// The clock model.
    pub clock: ClockConfig,
    /// Core cycles each instruction event takes (default 1).
    pub cycles_per_instruction: u32,
    /// Send TNT-64 (47 bits) instead of TNT-8 (6 bits) (TNT2). Default off: the client cores
    /// ptemu's profiles describe send short TNTs.
    pub long_tnt: bool,
    /// The CPU has TSX: PSB+ holds MODE.TSX (PSB1). Default on.
    pub tsx: bool,
    /// Back-pressure; `None` (the default): output never overflows.
    pub overflow: Option<Backpressure>,
    /// Packet bytes are handed to the output unit once this many are buffered (OUT1). Default 1024.
    pub flush_bytes: usize,
}

impl Default for TracerConfig {
    fn default() -> Self {
        TracerConfig {
            clock: ClockConfig::default(),
            cycles_per_instruction: 1,
            long_tnt: false,
            tsx: true,
            overflow: None,
            flush_bytes: 1024,
        }
    }
}
