//! Time as libipt estimates it from TSC, TMA, MTC, CYC and CBR, and the calibration of CYC
//! (the fast-counter:cycles ratio), with libipt's integer arithmetic and its wrap rules, so that
//! the estimates `ptdump --time` / `--tcal` prints are the same numbers.

/// The configuration the arithmetic reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeConfig {
    /// IA32_RTIT_CTL.MTCFreq.
    pub mtc_freq: u8,
    /// MSR_PLATFORM_INFO\[15:8\], the nominal frequency ratio (0: unknown).
    pub nom_freq: u8,
    /// CPUID.15H:EAX, the ART:TSC ratio's denominator.
    pub cpuid_15_eax: u32,
    /// CPUID.15H:EBX, its numerator.
    pub cpuid_15_ebx: u32,
    /// Erratum SKL168 (a CYC may be lost right before a PSB).
    pub skl168: bool,
}

/// Why an update or query failed, with libipt's error texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeError {
    /// No TSC yet (or no calibration).
    NoTime,
    /// A value that cannot be (a zero CBR, a CTC that went back twice).
    BadPacket,
    /// A packet where it cannot be (TMA without TSC, two TMAs).
    BadContext,
    /// A state the arithmetic does not expect.
    Internal,
    /// CPUID.15H is zero.
    BadConfig,
}

impl TimeError {
    /// libipt's text for the error.
    pub fn text(self) -> &'static str {
        match self {
            TimeError::NoTime => "no timing information",
            TimeError::BadPacket => "unknown packet",
            TimeError::BadContext => "unexpected packet context",
            TimeError::Internal => "internal error",
            TimeError::BadConfig => "bad configuration",
        }
    }
}

type R = Result<(), TimeError>;

/// The fcr is kept shifted left by this many bits.
pub const FCR_SHIFT: u32 = 8;

/// `ctc - last_ctc`, correcting one wrap of the CTC bits MTC carries.
fn ctc_delta(ctc: u32, last_ctc: u32, c: &TimeConfig) -> Result<u32, TimeError> {
    let mut ctc = ctc;
    if ctc < last_ctc {
        ctc = ctc.wrapping_add(1u32.wrapping_shl(u32::from(c.mtc_freq) + 8));
        if ctc < last_ctc {
            return Err(TimeError::BadPacket);
        }
    }
    Ok(ctc - last_ctc)
}

/// Crystal clock ticks to TSC ticks.
fn ctc_to_fc(ctc: u64, c: &TimeConfig) -> Result<u64, TimeError> {
    if c.cpuid_15_eax == 0 || c.cpuid_15_ebx == 0 {
        return Err(TimeError::BadConfig);
    }
    Ok(ctc.wrapping_mul(u64::from(c.cpuid_15_ebx)) / u64::from(c.cpuid_15_eax))
}

/// The time estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    tsc: u64,
    base: u64,
    fc: u64,
    ctc: u32,
    ctc_cyc: u32,
    lost_mtc: u32,
    lost_cyc: u32,
    have_tsc: bool,
    have_tma: bool,
    have_mtc: bool,
}

impl Time {
    /// The estimated TSC; `Err(NoTime)` (with the estimate) before the first TSC.
    pub fn tsc(&self) -> (u64, R) {
        (
            self.tsc,
            if self.have_tsc {
                Ok(())
            } else {
                Err(TimeError::NoTime)
            },
        )
    }

    /// At a TSC packet.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.have_tsc = true;
        self.have_tma = false;
        self.have_mtc = false;
        self.tsc = tsc;
        self.base = tsc;
        self.ctc = 0;
        self.fc = 0;
        self.lost_mtc = 0;
        self.lost_cyc = 0;
    }

    /// At a CBR packet.
    pub fn update_cbr(&mut self, ratio: u8) -> R {
        if ratio == 0 {
            return Err(TimeError::BadPacket);
        }
        Ok(())
    }

    /// At a TMA packet.
    pub fn update_tma(&mut self, ctc: u16, fc: u16, c: &TimeConfig) -> R {
        if !self.have_tsc || self.have_tma {
            return Err(TimeError::BadContext);
        }
        if self.have_mtc {
            return Err(TimeError::Internal);
        }
        let mtc_hi = u32::from(c.mtc_freq) + 8;
        let mask = 1u32.wrapping_shl(mtc_hi).wrapping_sub(1);
        self.have_tma = true;
        self.base = self.base.wrapping_sub(u64::from(fc));
        self.fc = self.fc.wrapping_add(u64::from(fc));
        // TMA's CTC holds all the bits MTC carries: it serves as an MTC.
        if mtc_hi <= 16 {
            self.have_mtc = true;
        }
        self.ctc = u32::from(ctc) & mask;
        self.ctc_cyc = self.ctc;
        Ok(())
    }

    /// At an MTC packet.
    pub fn update_mtc(&mut self, payload: u8, c: &TimeConfig) -> R {
        let (have_tsc, have_tma, have_mtc) = (self.have_tsc, self.have_tma, self.have_mtc);
        // MTCs between TSC and TMA are ignored.
        if have_tsc && !have_tma {
            return Ok(());
        }
        let base = self.base;
        let mut last_ctc = self.ctc;
        let ctc = u32::from(payload).wrapping_shl(u32::from(c.mtc_freq));
        if self.fc != 0 || self.lost_cyc != 0 || !have_mtc {
            self.ctc_cyc = ctc;
        }
        self.have_mtc = true;
        self.fc = 0;
        self.ctc = ctc;
        self.lost_cyc = 0;
        if !have_mtc {
            // The first MTC: without TMA there is nothing to measure from; after a TMA that
            // gave only the low 16 CTC bits, the high bits are this MTC's (one period back if
            // the low bits went back).
            if !have_tma {
                return Ok(());
            }
            if last_ctc & !0xffff != 0 {
                return Err(TimeError::Internal);
            }
            let lo = ctc & 0xffff;
            let mut hi = ctc & !0xffff;
            if lo < last_ctc {
                hi = hi.wrapping_sub(1 << 16);
                hi &= 0xffu32.wrapping_shl(u32::from(c.mtc_freq));
            }
            last_ctc |= hi;
        }
        let delta = match ctc_delta(ctc, last_ctc, c) {
            Ok(d) => d,
            Err(e) => {
                self.lost_mtc += 1;
                return Err(e);
            }
        };
        let tsc = ctc_to_fc(u64::from(delta), c)?;
        self.base = base.wrapping_add(tsc);
        self.tsc = self.base;
        Ok(())
    }

    /// The cycles of a CYC that fall in the current MTC period, when it is the first CYC after
    /// an MTC and the MTC periods since the last CYC are known.
    fn adjust_cyc(&self, cyc: u64, c: &TimeConfig, fcr: u64) -> Result<u64, TimeError> {
        if self.ctc == self.ctc_cyc {
            return Ok(cyc);
        }
        let delta = ctc_delta(self.ctc, self.ctc_cyc, c)?;
        let fc = ctc_to_fc(u64::from(delta), c)?;
        let old = fc.wrapping_shl(FCR_SHIFT) / fcr;
        Ok(cyc.max(old) - old)
    }

    /// At a CYC packet, with the calibration `fcr` (0: none, the CYC is lost).
    pub fn update_cyc(&mut self, value: u64, c: &TimeConfig, fcr: u64) -> R {
        if fcr == 0 {
            self.lost_cyc += 1;
            return Ok(());
        }
        let mut cyc = value;
        let mut fc = self.fc;
        if fc == 0 {
            cyc = self.adjust_cyc(cyc, c, fcr)?;
        }
        fc = fc.wrapping_add(cyc.wrapping_mul(fcr) >> FCR_SHIFT);
        self.fc = fc;
        self.tsc = self.base.wrapping_add(fc);
        Ok(())
    }
}

/// The calibration of CYC: the fast-counter:cycles ratio, from MTCs, TSCs in PSB+ or the
/// nominal frequency and CBR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcal {
    fcr: u64,
    min_fcr: u64,
    max_fcr: u64,
    tsc: u64,
    cyc_tsc: u64,
    cyc_mtc: u64,
    ctc: u32,
    lost_mtc: u32,
    have_mtc: bool,
    check_skl168: bool,
}

impl Default for Tcal {
    fn default() -> Self {
        Tcal {
            fcr: 0,
            min_fcr: u64::MAX,
            max_fcr: 0,
            tsc: 0,
            cyc_tsc: 0,
            cyc_mtc: 0,
            ctc: 0,
            lost_mtc: 0,
            have_mtc: false,
            check_skl168: false,
        }
    }
}

impl Tcal {
    fn have_fcr(&self) -> bool {
        self.min_fcr <= self.max_fcr
    }

    /// The ratio, shifted left by [`FCR_SHIFT`]; `NoTime` before any calibration.
    pub fn fcr(&self) -> Result<u64, TimeError> {
        if self.have_fcr() {
            Ok(self.fcr)
        } else {
            Err(TimeError::NoTime)
        }
    }

    fn set_fcr(&mut self, fcr: u64) {
        self.fcr = fcr;
        self.min_fcr = self.min_fcr.min(fcr);
        self.max_fcr = self.max_fcr.max(fcr);
    }

    /// At a PSB.
    pub fn update_psb(&mut self, c: &TimeConfig) {
        if c.skl168 {
            self.check_skl168 = true;
        }
    }

    /// At a TSC outside PSB+: kept for the next TSC in PSB+, not used.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.tsc = tsc;
        self.cyc_tsc = 0;
    }

    /// At a TSC in PSB+: calibrates from the cycles since the last TSC, unless MTCs do.
    pub fn header_tsc(&mut self, tsc: u64) -> R {
        let (last, cyc) = (self.tsc, self.cyc_tsc);
        self.tsc = tsc;
        self.cyc_tsc = 0;
        if last == 0 || cyc == 0 || self.have_mtc {
            return Ok(());
        }
        let mut tsc = tsc;
        if tsc < last {
            tsc = tsc.wrapping_add(1 << 56);
            if tsc < last {
                return Err(TimeError::BadPacket);
            }
        }
        let delta = tsc - last;
        if delta & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(TimeError::Internal);
        }
        self.set_fcr((delta << FCR_SHIFT) / cyc);
        Ok(())
    }

    /// At a CBR outside PSB+: the frequency changed; start over.
    pub fn update_cbr(&mut self, ratio: u8, c: &TimeConfig) -> R {
        *self = Tcal::default();
        self.header_cbr(ratio, c)
    }

    /// At a CBR in PSB+: calibrates from the nominal frequency, when known.
    pub fn header_cbr(&mut self, ratio: u8, c: &TimeConfig) -> R {
        let p1 = u64::from(c.nom_freq);
        if p1 == 0 {
            return Ok(());
        }
        if ratio == 0 {
            return Err(TimeError::BadPacket);
        }
        self.set_fcr((p1 << FCR_SHIFT) / u64::from(ratio));
        Ok(())
    }

    /// At an MTC: calibrates from the cycles of the MTC period(s) since the last one.
    pub fn update_mtc(&mut self, payload: u8, c: &TimeConfig) -> R {
        let (last_ctc, have_mtc, cyc, check) = (self.ctc, self.have_mtc, self.cyc_mtc, self.check_skl168);
        self.check_skl168 = false;
        let ctc = u32::from(payload).wrapping_shl(u32::from(c.mtc_freq));
        if !have_mtc {
            self.cyc_mtc = 0;
            self.ctc = ctc;
            self.have_mtc = true;
            return Ok(());
        }
        if cyc == 0 {
            return Ok(());
        }
        self.cyc_mtc = 0;
        self.ctc = ctc;
        self.lost_mtc += 1;
        let delta = ctc_delta(ctc, last_ctc, c)?;
        let fc = ctc_to_fc(u64::from(delta), c)?;
        if fc & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(TimeError::Internal);
        }
        let fcr = (fc << FCR_SHIFT) / cyc;
        // SKL168: skip the first MTC after PSB when MTCs were lost, or when it looks as if a
        // wrap CYC was.
        if check {
            if 1u32.wrapping_shl(u32::from(c.mtc_freq)) < delta {
                return Ok(());
            }
            if c.mtc_freq < 10 && self.have_fcr() {
                let dfc = self.fcr.wrapping_mul(cyc.wrapping_add(0xf00)) >> FCR_SHIFT;
                if dfc < fc {
                    return Ok(());
                }
            }
        }
        self.set_fcr(fcr);
        self.lost_mtc = 0;
        Ok(())
    }

    /// At a CYC.
    pub fn update_cyc(&mut self, value: u64) {
        self.cyc_mtc = self.cyc_mtc.wrapping_add(value);
        self.cyc_tsc = self.cyc_tsc.wrapping_add(value);
    }

    /// At an OVF, keeping the ratio (`--keep-tcal-on-ovf`).
    pub fn update_ovf(&mut self) {
        self.tsc = 0;
        self.cyc_tsc = 0;
        self.cyc_mtc = 0;
        self.ctc = 0;
        self.have_mtc = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> TimeConfig {
        TimeConfig {
            mtc_freq: 4,
            cpuid_15_eax: 1,
            cpuid_15_ebx: 4,
            ..Default::default()
        }
    }

    #[test]
    fn mtc_after_tsc_and_tma_advances_time() {
        let c = config();
        let mut t = Time::default();
        assert_eq!(t.tsc().1, Err(TimeError::NoTime));
        t.update_tsc(0x1000);
        t.update_tma(0x12, 0x8, &c).unwrap();
        // CTC 0x12 -> MTC payload 2 << 4 = 0x20: 0xe crystal ticks, 0x38 TSC ticks, less fc 8.
        t.update_mtc(2, &c).unwrap();
        assert_eq!(t.tsc(), (0x1000 - 8 + 0x38, Ok(())));
    }

    #[test]
    fn calibration_from_two_mtcs_and_cycles() {
        let c = config();
        let mut cal = Tcal::default();
        assert_eq!(cal.fcr(), Err(TimeError::NoTime));
        cal.update_mtc(1, &c).unwrap();
        cal.update_cyc(0x20);
        cal.update_mtc(2, &c).unwrap();
        // One MTC period: 16 crystal ticks, 64 TSC ticks over 32 cycles: 2.0.
        assert_eq!(cal.fcr(), Ok(2 << FCR_SHIFT));
        assert_eq!(Tcal::default().update_mtc(1, &TimeConfig::default()), Ok(()));
    }
}
