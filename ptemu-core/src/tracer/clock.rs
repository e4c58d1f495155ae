//! The clock model behind TSC, TMA, MTC and CYC (pt-packets.md §5.7, rules TIM1–TIM5).
//!
//! Core cycles drive everything. TSC ticks at the nominal ratio: `core_cycles * nominal / core`
//! (both in units of the 100 MHz bus clock). The always-running timer (ART, the crystal clock that
//! MTC and TMA report) ticks once per `tsc_per_art` TSC ticks (CPUID.15H EBX/EAX).

/// Clock parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct ClockConfig {
    /// Core:bus ratio at start (the CBR payload); must be non-zero.
    pub core_ratio: u8,
    /// TSC:bus ratio (the nominal frequency, MSR_PLATFORM_INFO\[15:8\]); must be non-zero.
    pub nominal_ratio: u8,
    /// TSC ticks per ART tick (CPUID.15H EBX/EAX): 2..=512, so TMA.FC (9 bits) can hold the
    /// fraction.
    pub tsc_per_art: u32,
    /// TSC value at cycle 0.
    pub tsc_start: u64,
}

crate::with_setters!(ClockConfig {
    with_core_ratio => core_ratio: u8,
    with_nominal_ratio => nominal_ratio: u8,
    with_tsc_per_art => tsc_per_art: u32,
    with_tsc_start => tsc_start: u64,
});

impl Default for ClockConfig {
    fn default() -> Self {
        // A 2.4 GHz part with a 24 MHz crystal: ratio 24, 100 TSC ticks per ART tick.
        ClockConfig {
            core_ratio: 24,
            nominal_ratio: 24,
            tsc_per_art: 100,
            tsc_start: 0x1_0000_0000,
        }
    }
}

/// The running clock.
#[derive(Clone, Debug)]
pub struct Clock {
    cfg: ClockConfig,
    cycles: u64,
    /// TSC at `base_cycles` (the last ratio change).
    base_tsc: u64,
    base_cycles: u64,
    /// Cycles at the last CYC sent (or when the counter was last reset).
    pub last_cyc: u64,
    /// ART >> MTCFreq at the last MTC sent (or at enable).
    pub last_mtc: u64,
}

impl Clock {
    /// A clock at cycle 0.
    pub fn new(cfg: ClockConfig) -> Self {
        let core_ratio = cfg.core_ratio.max(1);
        Clock {
            cfg: ClockConfig { core_ratio, ..cfg },
            cycles: 0,
            base_tsc: cfg.tsc_start,
            base_cycles: 0,
            last_cyc: 0,
            last_mtc: 0,
        }
    }

    /// Core cycles so far.
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// Advances by `n` core cycles.
    #[inline]
    pub fn advance(&mut self, n: u64) {
        self.cycles = self.cycles.wrapping_add(n);
    }

    /// The current TSC.
    pub fn tsc(&self) -> u64 {
        let d = u128::from(self.cycles - self.base_cycles) * u128::from(self.cfg.nominal_ratio)
            / u128::from(self.cfg.core_ratio);
        self.base_tsc.wrapping_add(d as u64)
    }

    /// The TSC at the start of the current ART tick `>> shift` (the time an MTC stands for,
    /// TIM2: the ART boundary it reports).
    pub fn art_boundary_tsc(&self, shift: u32) -> u64 {
        let per = u64::from(self.cfg.tsc_per_art.max(1));
        ((self.art() >> shift) << shift).wrapping_mul(per)
    }

    /// `n` core cycles as TSC ticks at the current ratio (how a decoder turns a CYC into time).
    pub fn cycles_to_tsc(&self, n: u64) -> u64 {
        (u128::from(n) * u128::from(self.cfg.nominal_ratio) / u128::from(self.cfg.core_ratio.max(1))) as u64
    }

    /// The current ART value.
    pub fn art(&self) -> u64 {
        self.tsc() / u64::from(self.cfg.tsc_per_art.max(1))
    }

    /// TMA's fields for the current TSC: CTC = ART\[15:0\], FC = TSC ticks since the ART tick.
    pub fn tma(&self) -> (u16, u16) {
        let per = u64::from(self.cfg.tsc_per_art.max(1));
        let tsc = self.tsc();
        ((tsc / per) as u16, (tsc % per) as u16)
    }

    /// The current core:bus ratio.
    pub fn core_ratio(&self) -> u8 {
        self.cfg.core_ratio
    }

    /// A new core:bus ratio from now on (0 is ignored: CBR 0 is not a legal ratio).
    pub fn set_core_ratio(&mut self, ratio: u8) {
        if ratio == 0 {
            return;
        }
        self.base_tsc = self.tsc();
        self.base_cycles = self.cycles;
        self.cfg.core_ratio = ratio;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_follows_the_ratio_and_tma_splits_it() {
        let mut c = Clock::new(ClockConfig {
            core_ratio: 48,
            nominal_ratio: 24,
            tsc_per_art: 100,
            tsc_start: 1000,
        });
        c.advance(2000);
        assert_eq!(c.tsc(), 2000);
        assert_eq!(c.art(), 20);
        c.advance(101);
        assert_eq!(c.tsc(), 2050);
        assert_eq!(c.tma(), (20, 50));
        c.set_core_ratio(24);
        c.advance(10);
        assert_eq!(c.tsc(), 2060);
    }
}
