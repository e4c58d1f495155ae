//! IA32_RTIT_CTL written as text: the SDM's field names (`TraceEn`, `MTCFreq`, `ADDR0_CFG`, ...)
//! with values, for `ptemu simulate --ctl KEY=VALUE`.
//!
//! Names match case-insensitively and ignore `_`, so `DisRETC`, `disretc` and `dis_retc` are one
//! field. `raw=0x…` replaces the whole value. Assignments apply in order.

use super::ctl::RtitCtl;
use super::msr::Msr;
use std::fmt;

/// One IA32_RTIT_CTL field: its SDM name, its lowest bit and its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtlField {
    /// The SDM's name.
    pub name: &'static str,
    /// Lowest bit.
    pub shift: u8,
    /// Width in bits.
    pub width: u8,
}

const fn f(name: &'static str, shift: u8, width: u8) -> CtlField {
    CtlField { name, shift, width }
}

/// Every named field of IA32_RTIT_CTL (pt-output.md §2), low bit first.
pub const CTL_FIELDS: &[CtlField] = &[
    f("TraceEn", 0, 1),
    f("CYCEn", 1, 1),
    f("OS", 2, 1),
    f("User", 3, 1),
    f("PwrEvtEn", 4, 1),
    f("FUPonPTW", 5, 1),
    f("FabricEn", 6, 1),
    f("CR3Filter", 7, 1),
    f("ToPA", 8, 1),
    f("MTCEn", 9, 1),
    f("TSCEn", 10, 1),
    f("DisRETC", 11, 1),
    f("PTWEn", 12, 1),
    f("BranchEn", 13, 1),
    f("MTCFreq", 14, 4),
    f("CycThresh", 19, 4),
    f("PSBFreq", 24, 4),
    f("EventEn", 31, 1),
    f("ADDR0_CFG", 32, 4),
    f("ADDR1_CFG", 36, 4),
    f("ADDR2_CFG", 40, 4),
    f("ADDR3_CFG", 44, 4),
    f("DisTNT", 55, 1),
    f("InjectPsbPmiOnEnable", 56, 1),
];

impl CtlField {
    /// The field called `name` (any case, `_` ignored).
    pub fn named(name: &str) -> Option<CtlField> {
        let key = fold(name);
        CTL_FIELDS.iter().copied().find(|f| fold(f.name) == key)
    }

    /// The largest value the field holds.
    pub fn max(self) -> u64 {
        (1u64 << self.width) - 1
    }

    /// The field's value in `ctl`.
    pub fn get(self, ctl: RtitCtl) -> u64 {
        (ctl.bits() >> self.shift) & self.max()
    }

    /// `ctl` with the field set to `value` (which must fit; see [`CtlField::max`]).
    pub fn set(self, ctl: RtitCtl, value: u64) -> RtitCtl {
        let mask = self.max() << self.shift;
        RtitCtl::from((ctl.bits() & !mask) | ((value << self.shift) & mask))
    }
}

fn fold(name: &str) -> String {
    name.chars()
        .filter(|&c| c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A `KEY=VALUE` that names no field, or whose value does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CtlTextError {
    /// No `=`.
    #[error("{0:?}: expected KEY=VALUE")]
    NoEquals(String),
    /// Not a field of IA32_RTIT_CTL.
    #[error("{key:?} is not an IA32_RTIT_CTL field (fields: {}, or raw)", CTL_FIELDS.iter().map(|f| f.name).collect::<Vec<_>>().join(", "))]
    UnknownField {
        /// The key given.
        key: String,
    },
    /// The value is not a number (decimal, `0x` hex, `0b` binary) or a boolean.
    #[error("{key}={value:?}: not a number or true/false")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
    /// The value does not fit the field.
    #[error("{field}={value}: the field is {width} bit(s) wide (at most {max})")]
    TooWide {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Its width.
        width: u8,
        /// The largest value.
        max: u64,
    },
}

/// Parses `0x…`, `0b…`, decimal, `true`/`false`, `on`/`off`, `yes`/`no`.
pub fn parse_value(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "true" | "on" | "yes" => return Some(1),
        "false" | "off" | "no" => return Some(0),
        _ => {}
    }
    if let Some(h) = lower.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(b) = lower.strip_prefix("0b") {
        u64::from_str_radix(b, 2).ok()
    } else {
        lower.parse().ok()
    }
}

/// Applies one `KEY=VALUE` to `ctl`: a field by its SDM name, or `raw` for the whole MSR.
pub fn apply_assignment(ctl: RtitCtl, text: &str) -> Result<RtitCtl, CtlTextError> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| CtlTextError::NoEquals(text.to_string()))?;
    let key = key.trim();
    let v = parse_value(value).ok_or_else(|| CtlTextError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
    })?;
    if fold(key) == "raw" {
        return Ok(RtitCtl::from(v));
    }
    let field = CtlField::named(key).ok_or_else(|| CtlTextError::UnknownField { key: key.to_string() })?;
    if v > field.max() {
        return Err(CtlTextError::TooWide {
            field: field.name,
            value: v,
            width: field.width,
            max: field.max(),
        });
    }
    Ok(field.set(ctl, v))
}

/// `ctl` as its set fields, `TraceEn=1 BranchEn=1 ...` (zero fields left out).
#[derive(Debug)]
pub struct CtlDisplay(pub RtitCtl);

impl fmt::Display for CtlDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for field in CTL_FIELDS {
            let v = field.get(self.0);
            if v != 0 {
                if !first {
                    f.write_str(" ")?;
                }
                first = false;
                write!(f, "{}={v}", field.name)?;
            }
        }
        if first {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

/// The MSR named `name`: `IA32_RTIT_CR3_MATCH` or `CR3_MATCH`, `IA32_RTIT_ADDR1_B` or `ADDR1_B`
/// (any case), or an address (`0x582`). Only the MSRs a trace configuration needs besides CTL.
pub fn config_msr(name: &str) -> Option<u32> {
    let upper = name.trim().to_ascii_uppercase();
    let short = upper.strip_prefix("IA32_RTIT_").unwrap_or(&upper);
    if short == "CR3_MATCH" {
        return Some(super::msr::IA32_RTIT_CR3_MATCH);
    }
    if let Some(rest) = short.strip_prefix("ADDR") {
        let b = rest.as_bytes();
        if b.len() == 3 && (b'0'..=b'3').contains(&b[0]) && b[1] == b'_' && (b[2] == b'A' || b[2] == b'B') {
            let n = u32::from(b[0] - b'0');
            return Some(super::msr::IA32_RTIT_ADDR0_A + 2 * n + u32::from(b[2] == b'B'));
        }
    }
    let addr = parse_value(&upper).and_then(|v| u32::try_from(v).ok())?;
    matches!(Msr::from_address(addr), Some(Msr::Cr3Match | Msr::Addr { .. })).then_some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name sets exactly the bits the modular-bitfield layout gives the field.
    #[test]
    fn every_field_matches_the_bitfield_layout() {
        let c = RtitCtl::new();
        let pairs: [(&str, RtitCtl); 24] = [
            ("TraceEn", c.with_trace_en(true)),
            ("CYCEn", c.with_cyc_en(true)),
            ("OS", c.with_os(true)),
            ("User", c.with_user(true)),
            ("PwrEvtEn", c.with_pwr_evt_en(true)),
            ("FUPonPTW", c.with_fup_on_ptw(true)),
            ("FabricEn", c.with_fabric_en(true)),
            ("CR3Filter", c.with_cr3_filter(true)),
            ("ToPA", c.with_topa(true)),
            ("MTCEn", c.with_mtc_en(true)),
            ("TSCEn", c.with_tsc_en(true)),
            ("DisRETC", c.with_dis_retc(true)),
            ("PTWEn", c.with_ptw_en(true)),
            ("BranchEn", c.with_branch_en(true)),
            ("MTCFreq", c.with_mtc_freq(15)),
            ("CycThresh", c.with_cyc_thresh(15)),
            ("PSBFreq", c.with_psb_freq(15)),
            ("EventEn", c.with_event_en(true)),
            ("ADDR0_CFG", c.with_addr0_cfg(15)),
            ("ADDR1_CFG", c.with_addr1_cfg(15)),
            ("ADDR2_CFG", c.with_addr2_cfg(15)),
            ("ADDR3_CFG", c.with_addr3_cfg(15)),
            ("DisTNT", c.with_dis_tnt(true)),
            ("InjectPsbPmiOnEnable", c.with_inject_psb_pmi_on_enable(true)),
        ];
        assert_eq!(pairs.len(), CTL_FIELDS.len());
        for (name, want) in pairs {
            let field = CtlField::named(name).unwrap();
            assert_eq!(field.set(c, field.max()), want, "{name}");
            assert_eq!(field.get(want), field.max(), "{name}");
            assert_eq!(want.bits() & RtitCtl::ALWAYS_RESERVED, 0, "{name}");
        }
    }

    #[test]
    fn names_are_case_insensitive_and_ignore_underscores() {
        for (text, want) in [
            ("disretc=1", RtitCtl::new().with_dis_retc(true)),
            ("DIS_RETC=true", RtitCtl::new().with_dis_retc(true)),
            ("addr0_cfg=2", RtitCtl::new().with_addr0_cfg(2)),
            ("Addr0Cfg=0x2", RtitCtl::new().with_addr0_cfg(2)),
            ("mtcfreq=0b11", RtitCtl::new().with_mtc_freq(3)),
            ("raw=0x2009", RtitCtl::from(0x2009)),
        ] {
            assert_eq!(apply_assignment(RtitCtl::new(), text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn assignments_apply_on_top_of_each_other_and_can_clear() {
        let mut c = RtitCtl::new();
        for a in ["raw=0x2409", "User=0", "PSBFreq=3", "TSCEn=off"] {
            c = apply_assignment(c, a).unwrap();
        }
        assert_eq!(
            c,
            RtitCtl::new()
                .with_trace_en(true)
                .with_branch_en(true)
                .with_psb_freq(3)
        );
        assert_eq!(CtlDisplay(c).to_string(), "TraceEn=1 BranchEn=1 PSBFreq=3");
    }

    #[test]
    fn bad_assignments_say_what_is_wrong() {
        let e = |t| apply_assignment(RtitCtl::new(), t).unwrap_err().to_string();
        assert!(e("TraceEn").contains("expected KEY=VALUE"));
        assert!(e("Tracing=1").contains("not an IA32_RTIT_CTL field"));
        assert!(e("MTCFreq=x").contains("not a number"));
        assert_eq!(
            e("MTCFreq=16"),
            "MTCFreq=16: the field is 4 bit(s) wide (at most 15)"
        );
        assert_eq!(e("OS=2"), "OS=2: the field is 1 bit(s) wide (at most 1)");
    }

    #[test]
    fn configuration_msrs_by_name_or_address() {
        assert_eq!(config_msr("CR3_MATCH"), Some(0x572));
        assert_eq!(config_msr("ia32_rtit_addr0_a"), Some(0x580));
        assert_eq!(config_msr("ADDR3_B"), Some(0x587));
        assert_eq!(config_msr("0x583"), Some(0x583));
        assert_eq!(config_msr("ADDR4_A"), None);
        assert_eq!(config_msr("0x570"), None, "CTL goes through --ctl");
    }
}
