//! Tracer settings that are not in IA32_RTIT_CTL: the clock, TNT size, back-pressure.

use super::clock::ClockConfig;
use crate::packing::Packing;
use crate::regs::PacketStyle;

/// The back-pressure model behind OVF (OVF1): the trace unit's internal buffer holds
/// `buffer_bytes` and drains `drain_bytes` every `per_cycles` core cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[non_exhaustive]
pub struct Backpressure {
    /// Internal buffer size in bytes (at least 256 is used).
    pub buffer_bytes: u32,
    /// Bytes drained per `per_cycles` cycles.
    pub drain_bytes: u32,
    /// The drain period in core cycles (at least 1).
    pub per_cycles: u32,
}

impl Backpressure {
    /// A buffer of `buffer_bytes` draining `drain_bytes` every `per_cycles` core cycles.
    pub fn new(buffer_bytes: u32, drain_bytes: u32, per_cycles: u32) -> Self {
        Backpressure {
            buffer_bytes,
            drain_bytes,
            per_cycles,
        }
    }

    /// The buffer a forced overflow (`overflow_at`) fills when no `overflow` is set: 1 KiB
    /// draining 4 bytes a cycle, so about 256 instructions lose their packets.
    pub const FORCED: Backpressure = Backpressure {
        buffer_bytes: 1024,
        drain_bytes: 4,
        per_cycles: 1,
    };
}

/// Tracer settings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
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
    /// Instructions (counting from 1) at which the internal buffer is made to overflow (the
    /// `ovf` fault, FLT2): it is full then and drains as `overflow` says (or as
    /// [`Backpressure::FORCED`] when `overflow` is unset).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub overflow_at: Vec<u64>,
    /// Packet bytes are handed to the output unit once this many are buffered (OUT1). Default 1024.
    pub flush_bytes: usize,
    /// How packets are laid out (spec/hardware.md); `None` (the default): the CPU profile's.
    pub packing: Option<Packing>,
    /// Which packets the tracer chooses where the SDM allows several (spec/hardware.md HW6-HW11):
    /// `sdm`, `skylake` or `icelake`; `None` (the default): the CPU profile's.
    pub style: Option<PacketStyle>,
}

impl TracerConfig {
    /// The layout the tracer uses on `cpu`: [`TracerConfig::packing`], else the profile's.
    pub fn packing_on(&self, cpu: &crate::regs::CpuProfile) -> Packing {
        self.packing.unwrap_or(cpu.packing)
    }

    /// The packet choices the tracer makes on `cpu`: [`TracerConfig::style`], else the
    /// profile's.
    pub fn style_on(&self, cpu: &crate::regs::CpuProfile) -> PacketStyle {
        self.style.unwrap_or(cpu.style)
    }
}

impl Default for TracerConfig {
    fn default() -> Self {
        TracerConfig {
            clock: ClockConfig::default(),
            cycles_per_instruction: 1,
            long_tnt: false,
            tsx: true,
            overflow: None,
            overflow_at: Vec::new(),
            flush_bytes: 1024,
            packing: None,
            style: None,
        }
    }
}

/// The largest `flush_bytes`: 1 MiB (the tracer's buffer is this plus 4 KiB).
pub const MAX_FLUSH_BYTES: usize = 1 << 20;
/// The largest `cycles_per_instruction` and back-pressure `per_cycles`.
pub const MAX_CYCLES: u32 = 1 << 20;
/// The largest back-pressure `buffer_bytes`.
pub const MAX_BUFFER_BYTES: u32 = 1 << 24;

crate::with_setters!(TracerConfig {
    with_clock => clock: ClockConfig,
    with_cycles_per_instruction => cycles_per_instruction: u32,
    with_long_tnt => long_tnt: bool,
    with_tsx => tsx: bool,
    with_overflow => overflow: Option<Backpressure>,
    with_overflow_at => overflow_at: Vec<u64>,
    with_flush_bytes => flush_bytes: usize,
    with_packing => packing: Option<Packing>,
    with_style => style: Option<PacketStyle>,
});

/// A tracer setting outside its range (spec/generation.md, "Tracer settings").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value} is outside {lo}..={hi} ({why})")]
#[non_exhaustive]
pub struct SettingError {
    /// The setting, as the TOML file names it (`clock.core_ratio`).
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// The smallest value allowed.
    pub lo: u64,
    /// The largest value allowed.
    pub hi: u64,
    /// What the setting is, and why the range.
    pub why: &'static str,
}

impl TracerConfig {
    /// Checks every setting against its range (spec/generation.md, "Tracer settings"): the clock
    /// ratios non-zero, `tsc_per_art` 2..=512 (TMA's 9-bit FastCounter holds the fraction of an
    /// ART tick), and every size and period bounded so no setting can exhaust memory or overflow.
    /// The error names the field.
    pub fn validate(&self) -> Result<(), SettingError> {
        let c = &self.clock;
        let range = |field: &'static str, value: u64, lo: u64, hi: u64, why: &'static str| {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(SettingError {
                    field,
                    value,
                    lo,
                    hi,
                    why,
                })
            }
        };
        range(
            "clock.core_ratio",
            c.core_ratio.into(),
            1,
            255,
            "the CBR payload, a non-zero ratio",
        )?;
        range(
            "clock.nominal_ratio",
            c.nominal_ratio.into(),
            1,
            255,
            "the TSC:bus ratio, non-zero",
        )?;
        range(
            "clock.tsc_per_art",
            c.tsc_per_art.into(),
            2,
            512,
            "CPUID.15H EBX/EAX; TMA's 9-bit FastCounter holds the fraction of an ART tick",
        )?;
        range(
            "cycles_per_instruction",
            self.cycles_per_instruction.into(),
            1,
            MAX_CYCLES.into(),
            "core cycles per instruction",
        )?;
        range(
            "flush_bytes",
            self.flush_bytes as u64,
            0,
            MAX_FLUSH_BYTES as u64,
            "bytes buffered before the output unit takes them",
        )?;
        // Instruction numbers count from 1, as `--fault ovf@N` does (spec/truth.md FLT1).
        if let Some(&first) = self.overflow_at.iter().min() {
            range(
                "overflow_at",
                first,
                1,
                u64::MAX,
                "instruction numbers count from 1",
            )?;
        }
        if let Some(b) = &self.overflow {
            range(
                "overflow.buffer_bytes",
                b.buffer_bytes.into(),
                0,
                MAX_BUFFER_BYTES.into(),
                "the internal buffer; below 256 counts as 256",
            )?;
            range(
                "overflow.per_cycles",
                b.per_cycles.into(),
                1,
                MAX_CYCLES.into(),
                "the drain period in core cycles",
            )?;
        }
        Ok(())
    }
}
