//! The #GP rules of WRMSR and RDMSR (pt-output.md §1–§4, M1–M3, BDM106).
//!
//! These are pure functions of the CPU profile, the current register values and the access;
//! [`crate::output::OutputUnit`] applies them before any state changes.

use super::cpu::{CpuProfile, Errata, Leaf14Ebx as Ebx, Leaf14Ecx as Ecx};
use super::fault::{GpFault, GpReason};
use super::msr::Msr;
use super::{Cr3Match, OutputBase, RegisterFile, RtitCtl, RtitStatus};
use crate::rules::Rule;

/// Checks that `msr` exists on `cpu` (M1 and the existence rules of §1).
pub fn check_present(cpu: &CpuProfile, msr: Msr, value: Option<u64>) -> Result<(), GpFault> {
    let gp = |rule, reason| {
        Err(GpFault {
            msr,
            value,
            rule,
            reason,
        })
    };
    let is_pt = !matches!(
        msr,
        Msr::PerfGlobalStatus | Msr::PerfGlobalStatusReset | Msr::PerfGlobalStatusSet
    );
    if is_pt && !cpu.pt_supported {
        return gp(Rule::M1, GpReason::PtUnsupported);
    }
    match msr {
        Msr::OutputBase | Msr::OutputMaskPtrs if !cpu.ecx().intersects(Ecx::TOPA | Ecx::SINGLE_RANGE) => gp(
            Rule::M1,
            GpReason::NotPresent {
                requires: "CPUID.14H.0:ECX[0] or ECX[2]",
            },
        ),
        Msr::Cr3Match if !cpu.ebx().contains(Ebx::CR3_FILTER) => gp(
            Rule::M1,
            GpReason::NotPresent {
                requires: "CPUID.14H.0:EBX[0]",
            },
        ),
        Msr::Addr { n, .. } if n >= cpu.range_count() => gp(
            Rule::M1,
            GpReason::NotPresent {
                requires: "n < CPUID.14H.1:EAX[2:0] (RANGECNT)",
            },
        ),
        _ => Ok(()),
    }
}

/// Checks a WRMSR of `value` to `msr` against every #GP rule.
pub fn check_write(cpu: &CpuProfile, regs: &RegisterFile, msr: Msr, value: u64) -> Result<(), GpFault> {
    check_present(cpu, msr, Some(value))?;
    let gp = |rule, reason| {
        Err(GpFault {
            msr,
            value: Some(value),
            rule,
            reason,
        })
    };
    let tracing = regs.ctl.trace_en();
    let config_msr = !matches!(
        msr,
        Msr::Ctl | Msr::PerfGlobalStatus | Msr::PerfGlobalStatusReset | Msr::PerfGlobalStatusSet
    );
    if tracing && config_msr {
        return gp(Rule::M3, GpReason::WhileTracing);
    }
    match msr {
        Msr::Ctl => check_ctl(cpu, regs.ctl, value),
        Msr::Status => check_status(cpu, value),
        Msr::OutputBase => {
            if OutputBase::from(value).reserved() != 0 {
                return gp(Rule::R7, GpReason::ReservedBits { bits: value & 0x7f });
            }
            if value & cpu.above_maxphyaddr() != 0 {
                return gp(
                    Rule::M2,
                    GpReason::AboveMaxPhyAddr {
                        maxphyaddr: cpu.maxphyaddr,
                    },
                );
            }
            Ok(())
        }
        Msr::OutputMaskPtrs => Ok(()),
        Msr::Cr3Match if Cr3Match::from(value).reserved() != 0 => {
            gp(Rule::M2, GpReason::ReservedBits { bits: value & 0x1f })
        }
        Msr::Cr3Match => Ok(()),
        Msr::Addr { .. } if !is_canonical(value, cpu.linear_address_bits) => gp(
            Rule::M2,
            GpReason::NonCanonical {
                bits: cpu.linear_address_bits,
            },
        ),
        Msr::Addr { .. } => Ok(()),
        Msr::PerfGlobalStatus => gp(Rule::M2, GpReason::ReadOnly),
        Msr::PerfGlobalStatusReset | Msr::PerfGlobalStatusSet => Ok(()),
    }
}

fn check_ctl(cpu: &CpuProfile, old: RtitCtl, value: u64) -> Result<(), GpFault> {
    let new = RtitCtl::from(value);
    let gp = |rule, reason| {
        Err(GpFault {
            msr: Msr::Ctl,
            value: Some(value),
            rule,
            reason,
        })
    };
    // M3 with its exception: rewriting the current value is fine; a write clearing TraceEn is M4.
    if old.trace_en() && new.trace_en() && old.bits() != value {
        return gp(Rule::M3, GpReason::WhileTracing);
    }
    if value & RtitCtl::ALWAYS_RESERVED != 0 {
        return gp(
            Rule::M2,
            GpReason::ReservedBits {
                bits: value & RtitCtl::ALWAYS_RESERVED,
            },
        );
    }
    let (ebx, ecx) = (cpu.ebx(), cpu.ecx());
    let gated: [(bool, &str, bool, &str); 11] = [
        (
            new.cyc_en(),
            "CYCEn",
            ebx.contains(Ebx::PSB_CYC),
            "CPUID.14H.0:EBX[1]",
        ),
        (
            new.pwr_evt_en(),
            "PwrEvtEn",
            ebx.contains(Ebx::POWER_EVENT),
            "CPUID.14H.0:EBX[5]",
        ),
        (
            new.fup_on_ptw(),
            "FUPonPTW",
            ebx.contains(Ebx::PTWRITE),
            "CPUID.14H.0:EBX[4]",
        ),
        (
            new.fabric_en(),
            "FabricEn",
            ecx.contains(Ecx::TRANSPORT),
            "CPUID.14H.0:ECX[3]",
        ),
        (
            new.cr3_filter(),
            "CR3Filter",
            ebx.contains(Ebx::CR3_FILTER),
            "CPUID.14H.0:EBX[0]",
        ),
        (new.topa(), "ToPA", ecx.contains(Ecx::TOPA), "CPUID.14H.0:ECX[0]"),
        (
            new.mtc_en(),
            "MTCEn",
            ebx.contains(Ebx::MTC),
            "CPUID.14H.0:EBX[3]",
        ),
        (
            new.ptw_en(),
            "PTWEn",
            ebx.contains(Ebx::PTWRITE),
            "CPUID.14H.0:EBX[4]",
        ),
        (
            new.event_en(),
            "EventEn",
            ebx.contains(Ebx::EVENT_TRACE),
            "CPUID.14H.0:EBX[7]",
        ),
        (
            new.dis_tnt(),
            "DisTNT",
            ebx.contains(Ebx::TNT_DISABLE),
            "CPUID.14H.0:EBX[8]",
        ),
        (
            new.inject_psb_pmi_on_enable(),
            "InjectPsbPmiOnEnable",
            ebx.contains(Ebx::PSB_PMI_PRESERVE),
            "CPUID.14H.0:EBX[6]",
        ),
    ];
    for (set, field, supported, requires) in gated {
        if set && !supported {
            return gp(Rule::M2, GpReason::Unsupported { field, requires });
        }
    }
    let encodings: [(&str, u8, bool, &str, u16, &str); 3] = [
        (
            "MTCFreq",
            new.mtc_freq(),
            ebx.contains(Ebx::MTC),
            "CPUID.14H.0:EBX[3]",
            cpu.mtc_periods(),
            "CPUID.14H.1:EAX[31:16]",
        ),
        (
            "CycThresh",
            new.cyc_thresh(),
            ebx.contains(Ebx::PSB_CYC),
            "CPUID.14H.0:EBX[1]",
            cpu.cyc_thresholds(),
            "CPUID.14H.1:EBX[15:0]",
        ),
        (
            "PSBFreq",
            new.psb_freq(),
            ebx.contains(Ebx::PSB_CYC),
            "CPUID.14H.0:EBX[1]",
            cpu.psb_periods(),
            "CPUID.14H.1:EBX[31:16]",
        ),
    ];
    /// The values a CPUID bitmap allows, as a reader wants them: "0, 3, 6, 9, by
    /// CPUID.14H.1:EAX[31:16] = 0x0249".
    fn allowed_values(bitmap: u16, name: &str) -> String {
        let values: Vec<String> = (0..16)
            .filter(|v| bitmap & (1 << v) != 0)
            .map(|v: u32| v.to_string())
            .collect();
        let values = if values.is_empty() {
            "none".to_owned()
        } else {
            values.join(", ")
        };
        format!("{values}, by {name} = {bitmap:#06x}")
    }
    for (field, v, supported, requires, bitmap, bitmap_name) in encodings {
        if !supported {
            if v != 0 {
                return gp(Rule::M2, GpReason::Unsupported { field, requires });
            }
        } else if bitmap & (1 << v) == 0 {
            return gp(
                Rule::M2,
                GpReason::Encoding {
                    field,
                    value: v.into(),
                    allowed: allowed_values(bitmap, bitmap_name),
                },
            );
        }
    }
    for (n, field) in ADDR_CFG.into_iter().enumerate() {
        let cfg = new.addr_cfg(n);
        if cfg != 0 && n >= cpu.range_count() {
            return gp(
                Rule::M2,
                GpReason::Unsupported {
                    field,
                    requires: "n < CPUID.14H.1:EAX[2:0] (RANGECNT)",
                },
            );
        }
        if cfg > 2 {
            return gp(
                Rule::M2,
                GpReason::Encoding {
                    field,
                    value: cfg.into(),
                    allowed: "0, 1, 2".into(),
                },
            );
        }
    }
    if new.trace_en() && !new.topa() && !new.fabric_en() && !ecx.contains(Ecx::SINGLE_RANGE) {
        return gp(Rule::M2, GpReason::NoSingleRange);
    }
    if new.trace_en() && !new.branch_en() && cpu.has(Errata::BDM106) {
        return gp(Rule::BDM106, GpReason::BranchEnRequired);
    }
    Ok(())
}

const ADDR_CFG: [&str; 4] = ["ADDR0_CFG", "ADDR1_CFG", "ADDR2_CFG", "ADDR3_CFG"];

fn check_status(cpu: &CpuProfile, value: u64) -> Result<(), GpFault> {
    let gp = |rule, reason| {
        Err(GpFault {
            msr: Msr::Status,
            value: Some(value),
            rule,
            reason,
        })
    };
    if value & RtitStatus::ALWAYS_RESERVED != 0 {
        return gp(
            Rule::M2,
            GpReason::ReservedBits {
                bits: value & RtitStatus::ALWAYS_RESERVED,
            },
        );
    }
    let status = RtitStatus::from(value);
    if (status.pend_psb() || status.pend_topa_pmi()) && !cpu.ebx().contains(Ebx::PSB_PMI_PRESERVE) {
        return gp(
            Rule::M2,
            GpReason::Unsupported {
                field: "PendPSB/PendTopaPMI",
                requires: "CPUID.14H.0:EBX[6]",
            },
        );
    }
    if status.packet_byte_cnt() != 0 && !cpu.ebx().contains(Ebx::PSB_CYC) {
        return gp(
            Rule::M2,
            GpReason::Unsupported {
                field: "PacketByteCnt",
                requires: "CPUID.14H.0:EBX[1]",
            },
        );
    }
    Ok(())
}

/// Whether `value` is canonical for a `bits`-wide linear address space.
pub fn is_canonical(value: u64, bits: u8) -> bool {
    let shift = 64 - u32::from(bits);
    (((value << shift) as i64) >> shift) as u64 == value
}
