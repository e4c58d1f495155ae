//! The general-protection fault a WRMSR or RDMSR raises.

use super::msr::Msr;
use crate::rules::Rule;
use std::fmt;

/// Why an MSR access raised #GP.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpReason {
    /// Intel PT is not supported: CPUID.(7,0):EBX\[25\] = 0.
    PtUnsupported,
    /// The MSR does not exist on this CPU.
    NotPresent {
        /// The CPUID condition it needs.
        requires: &'static str,
    },
    /// Bits no CPU defines are set.
    ReservedBits {
        /// The offending bits.
        bits: u64,
    },
    /// A field is set whose CPUID capability is absent.
    Unsupported {
        /// SDM field name.
        field: &'static str,
        /// The CPUID bit that unlocks it.
        requires: &'static str,
    },
    /// A multi-bit field holds an encoding the CPU does not allow.
    Encoding {
        /// SDM field name.
        field: &'static str,
        /// The encoding written.
        value: u64,
        /// The values allowed, and the CPUID bitmap that allows them.
        allowed: String,
    },
    /// A configuration MSR was written while TraceEn stays 1.
    WhileTracing,
    /// TraceEn set with single-range output (ToPA=0, FabricEn=0) on a CPU without it.
    NoSingleRange,
    /// An address has bits at or above MAXPHYADDR.
    AboveMaxPhyAddr {
        /// MAXPHYADDR of the profile.
        maxphyaddr: u8,
    },
    /// An address is not canonical.
    NonCanonical {
        /// Linear-address width of the profile.
        bits: u8,
    },
    /// The MSR is read-only.
    ReadOnly,
    /// Broadwell: TraceEn set with BranchEn=0.
    BranchEnRequired,
}

impl fmt::Display for GpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpReason::PtUnsupported => write!(f, "Intel PT is not supported (CPUID.(7,0):EBX[25]=0)"),
            GpReason::NotPresent { requires } => write!(f, "MSR not present: needs {requires}"),
            GpReason::ReservedBits { bits } => write!(f, "reserved bits set: {bits:#x}"),
            GpReason::Unsupported { field, requires } => {
                write!(f, "{field} set but the CPU lacks {requires}")
            }
            GpReason::Encoding {
                field,
                value,
                allowed,
            } => {
                write!(f, "{field}={value} not allowed (allowed: {allowed})")
            }
            GpReason::WhileTracing => write!(f, "write while TraceEn=1 that does not clear TraceEn"),
            GpReason::NoSingleRange => write!(
                f,
                "TraceEn with ToPA=0 and FabricEn=0 but no single-range output (CPUID.14H.0:ECX[2]=0)"
            ),
            GpReason::AboveMaxPhyAddr { maxphyaddr } => {
                write!(f, "address bits at or above MAXPHYADDR ({maxphyaddr}) set")
            }
            GpReason::NonCanonical { bits } => write!(f, "address not canonical ({bits}-bit)"),
            GpReason::ReadOnly => write!(f, "read-only MSR"),
            GpReason::BranchEnRequired => {
                write!(f, "TraceEn set with BranchEn=0 (Broadwell erratum BDM106)")
            }
        }
    }
}

/// A #GP raised by `wrmsr` or `rdmsr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("#GP: {} {}: {reason} [rule {rule}]", msr.name(), match value { Some(v) => format!("<- {v:#x}"), None => "read".to_string() })]
#[non_exhaustive]
pub struct GpFault {
    /// The MSR accessed.
    pub msr: Msr,
    /// The value written (`None` for a read).
    pub value: Option<u64>,
    /// The rule that raises the fault.
    pub rule: Rule,
    /// Why.
    pub reason: GpReason,
}
