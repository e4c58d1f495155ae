//! Counters of what the tracer generated.

use crate::packet::Packet;
use std::collections::BTreeMap;

/// What the tracer generated (packets that reached the output unit's input).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracerStats {
    /// Events handled.
    pub events: u64,
    /// Instruction events handled.
    pub instructions: u64,
    /// Packets by [`Packet::kind_index`].
    pub packets: [u64; Packet::KINDS],
    /// TNT bits (conditional branches and compressed returns).
    pub tnt_bits: u64,
    /// Returns sent as a TNT bit.
    pub compressed_returns: u64,
    /// PSB+ sequences.
    pub psbs: u64,
    /// Bytes handed to the output unit.
    pub bytes: u64,
    /// Overflows that ended with an OVF.
    pub overflows: u64,
    /// Events whose packets back-pressure dropped.
    pub dropped_events: u64,
    /// Bytes back-pressure dropped.
    pub bytes_dropped: u64,
    /// Packets that could not be encoded (never expected; counted, not panicked on).
    pub packets_lost: u64,
    /// PTWRITE instructions in traced code (ContextEn and FilterEn) that sent no PTW packet
    /// because PTWEn (IA32_RTIT_CTL\[12\]) was 0: with PTWEn=1 each would have sent one.
    pub ptwrites_off: u64,
}

impl TracerStats {
    /// Non-zero packet counts by name.
    pub fn packets_by_name(&self) -> BTreeMap<&'static str, u64> {
        Packet::KIND_NAMES
            .iter()
            .zip(self.packets)
            .filter(|(_, n)| *n > 0)
            .map(|(&k, n)| (k, n))
            .collect()
    }

    /// Packets of one kind, by name (`"tip"`, `"tnt.8"`, ...).
    pub fn count(&self, name: &str) -> u64 {
        Packet::KIND_NAMES
            .iter()
            .position(|&k| k == name)
            .map_or(0, |i| self.packets[i])
    }
}
