//! Rule identifiers from the project's output fact sheet (`pt-output.md`), as cited in `spec/output.md`.
//!
//! Every behaviour of the output unit that can be observed (a #GP, an operational error, an event)
//! carries the [`Rule`] that mandates it, so a user can look the rule up in `spec/output.md`.

/// Declares a rule-ID enum with `ALL` and `id()`; used for [`Rule`] and the tracer's generation
/// rules.
macro_rules! rule_ids {
    ($(#[$edoc:meta])* $name:ident, $spec:literal; $($(#[$doc:meta])* $id:ident,)*) => {
        $(#[$edoc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$doc])* $id,)*
        }

        impl $name {
            /// Every rule, in spec order.
            pub const ALL: &'static [$name] = &[$($name::$id,)*];

            #[doc = concat!("The rule ID as written in `", $spec, "`.")]
            pub fn id(self) -> &'static str {
                match self {
                    $($name::$id => stringify!($id),)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.id())
            }
        }
    };
}
pub(crate) use rule_ids;

rule_ids! {
    /// A rule ID of `spec/output.md`.
    Rule, "spec/output.md";
    /// No PT support: every RTIT MSR access #GPs.
    M1,
    /// Reserved bit or reserved encoding in a WRMSR: #GP.
    M2,
    /// WRMSR to a PT configuration MSR while TraceEn stays 1: #GP.
    M3,
    /// A CTL write that clears TraceEn may change other bits too.
    M4,
    /// Configuration MSRs are per logical processor.
    M5,
    /// Cold and warm reset.
    M6,
    /// Reads of STATUS and OUTPUT_* while tracing (ptemu: always exact).
    M7,
    /// Entry i of a table lives at table base + 8*i.
    T1,
    /// A table holds at most 2^25 entries.
    T2,
    /// A table base must be 4 KiB aligned.
    T3,
    /// A region base must be aligned to the region size.
    T4,
    /// END together with INT or STOP is an error.
    T5,
    /// END in entry 0 of a table is an error.
    T6,
    /// Base bits at or above MAXPHYADDR are an error.
    T7,
    /// Single-output-region ToPA rules (MENTRY=0).
    T8,
    /// Entries may be cached; ptemu reads each one when it becomes current.
    T9,
    /// Each byte goes to region base + output offset.
    W1,
    /// Regions form one stream; packets straddle regions.
    W2,
    /// A full region without STOP moves the walk to the next entry.
    W3,
    /// END hops to entry 0 of the next table.
    W4,
    /// Wrap to entry 0 after index 2^25-1.
    W5,
    /// END hops count as part of the walk and write nothing.
    W6,
    /// A full STOP region sets Stopped and clears TriggerEn.
    S1,
    /// No packet after STOP; output ends at the region's last byte.
    S2,
    /// MSRs after STOP: the STOP entry, OutputOffset = region size.
    S3,
    /// Re-enable after STOP: illegal offset, or no output while Stopped.
    S4,
    /// STOP+INT: stop first, then the PMI.
    S5,
    /// An IP TraceStop also sets Stopped.
    S6,
    /// A full INT region raises a ToPA PMI and sets GLOBAL_STATUS\[55\].
    P1,
    /// The PMI is imprecise: output continues past it.
    P2,
    /// Two INT regions: two PMIs (ptemu never merges).
    P3,
    /// Single-entry ToPA: the PMI comes before the region fills.
    P4,
    /// GLOBAL_STATUS\[55\] is set by the time the disable flush completes.
    P5,
    /// PSB and PMI preservation (PendTopaPMI).
    P6,
    /// Filled regions are indexes 0..MaskOrTableOffset-1.
    P7,
    /// Single-range byte address.
    R1,
    /// Single-range size = mask + 1.
    R2,
    /// Single range is circular.
    R3,
    /// Single range: mask not contiguous.
    R4a,
    /// Single range: base overlaps the mask.
    R4b,
    /// Single range: OutputOffset > mask.
    R4c,
    /// Single-range OutputOffset stays within 0..mask.
    R5,
    /// Power-of-two ranges as drivers build them.
    R6,
    /// OUTPUT_BASE bits 6:0 #GP; coarser misalignment is an operational error.
    R7,
    /// ToPA reserved bit set.
    E1a,
    /// ToPA alignment violation.
    E1b,
    /// Illegal ToPA OutputOffset.
    E1c,
    /// ToPA structural rule violated.
    E1d,
    /// Single-range rule violated.
    E1e,
    /// Operational errors are detected only while TraceEn=1.
    E2,
    /// Error sets STATUS.Error, clears TriggerEn and stops output.
    E3,
    /// Recovery: clear TraceEn, fix, clear Error, re-enable.
    E4,
    /// Program the other MSRs first, CTL last; Stopped and Error are sticky.
    EN1,
    /// On enable a PSB+ is due when PacketByteCnt = 0 or PSB is not configurable.
    EN2,
    /// On disable the output is flushed and the MSRs become exact.
    EN3,
    /// A full buffer never produces OVF.
    O5,
    /// Broadwell erratum BDM106: TraceEn with BranchEn=0 #GPs.
    BDM106,
    /// Tiger Lake class erratum TGL052: single range larger than 4 KiB corrupts data.
    TGL052,
}
