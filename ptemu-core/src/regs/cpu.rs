//! CPU profiles: CPUID leaf 14H, MAXPHYADDR and the errata of named parts.
//!
//! The values and their sources are listed in `spec/cpu-profiles.md`.

use crate::packing::Packing;
use bitflags::bitflags;
use std::fmt;

bitflags! {
    /// CPUID.(EAX=14H,ECX=0):EBX feature bits (pt-output.md §11.1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct Leaf14Ebx: u32 {
        /// Bit 0: CR3 filtering (CTL.CR3Filter, IA32_RTIT_CR3_MATCH).
        const CR3_FILTER = 1 << 0;
        /// Bit 1: configurable PSB and CYC (PSBFreq, CYCEn, CycThresh, PacketByteCnt).
        const PSB_CYC = 1 << 1;
        /// Bit 2: IP filtering, TraceStop, MSRs kept across warm reset.
        const IP_FILTER = 1 << 2;
        /// Bit 3: MTC (MTCEn, MTCFreq).
        const MTC = 1 << 3;
        /// Bit 4: PTWRITE (PTWEn, FUPonPTW).
        const PTWRITE = 1 << 4;
        /// Bit 5: Power Event Trace (PwrEvtEn).
        const POWER_EVENT = 1 << 5;
        /// Bit 6: PSB and PMI preservation (CTL\[56\], STATUS\[7:6\]).
        const PSB_PMI_PRESERVE = 1 << 6;
        /// Bit 7: Event Trace (CTL.EventEn).
        const EVENT_TRACE = 1 << 7;
        /// Bit 8: TNT disable (CTL.DisTNT).
        const TNT_DISABLE = 1 << 8;
    }
}

bitflags! {
    /// CPUID.(EAX=14H,ECX=0):ECX output bits (pt-output.md §11.1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct Leaf14Ecx: u32 {
        /// Bit 0: ToPA output.
        const TOPA = 1 << 0;
        /// Bit 1: ToPA tables may hold many output entries (MENTRY).
        const TOPA_MULTI = 1 << 1;
        /// Bit 2: single-range output.
        const SINGLE_RANGE = 1 << 2;
        /// Bit 3: output to the trace transport subsystem (FabricEn).
        const TRANSPORT = 1 << 3;
        /// Bit 31: IP payloads are linear addresses.
        const LIP = 1 << 31;
    }
}

bitflags! {
    /// Errata of a part: the trace-output ones a profile carries (CP2), of which ptemu produces
    /// the [`Errata::MODELED`] ones.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct Errata: u32 {
        /// BDM106: a WRMSR that sets TraceEn with BranchEn=0 #GPs.
        const BDM106 = 1 << 0;
        /// TGL052 (= ADL037, RPL017): single-range output larger than 4 KiB writes wrong data.
        const TGL052 = 1 << 1;
        /// BDM70 (= SKD024, SKL021, KBL021): the PSB+ before a TIP.PGE holds FUP and MODE.Exec.
        const BDM70 = 1 << 2;
        /// BDM64: a wrong branch packet may precede a transactional abort's (TSX; not modeled).
        const BDM64 = 1 << 3;
        /// SKD007: an OVF may be sent after the first byte of a multi-byte CYC.
        const SKD007 = 1 << 4;
        /// SKD010: a FUP may be dropped after OVF.
        const SKD010 = 1 << 5;
        /// SKD022: a VM entry that clears TraceEn sends a FUP before TIP.PGD (VMX; not modeled).
        const SKD022 = 1 << 6;
        /// SKL014: the TIP.PGD of a direct unconditional branch that leaves the filter has no IP.
        const SKL014 = 1 << 7;
        /// APL11: an OVF may be followed by a TIP.PGD.
        const APL11 = 1 << 8;
        /// APL12: an OVF that resolves while PacketEn=0 may be followed by a FUP.
        const APL12 = 1 << 9;
        /// SKL168: a CYC (and its MTC) just before a PSB may be dropped.
        const SKL168 = 1 << 10;
        /// SKZ84: TMA may be corrupt in a guest with TSC scaling or offsetting (VMX; not modeled).
        const SKZ84 = 1 << 11;
    }
}

/// An erratum list entry that names no known erratum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown erratum `{id}` (known: {})", Errata::known_ids())]
pub struct UnknownErratum {
    /// The entry as given.
    pub id: String,
}

impl Errata {
    /// Looks an erratum up by its Intel ID, case-insensitively (`"TGL052"`, `"bdm106"`).
    pub fn from_id(id: &str) -> Option<Self> {
        Errata::all()
            .iter_names()
            .find(|(name, _)| name.eq_ignore_ascii_case(id))
            .map(|(_, flag)| flag)
    }

    /// The IDs of the errata in `self`, in flag order.
    pub fn ids(&self) -> Vec<&'static str> {
        self.iter_names().map(|(name, _)| name).collect()
    }

    /// Every erratum's ID, comma-separated, for messages.
    pub fn known_ids() -> String {
        Errata::all()
            .iter_names()
            .map(|(name, _)| name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Errata whose shape ptemu's tracer and output unit produce; the others are carried by
    /// the profile (so decoders are told) but change no byte (CP7; spec/cpu-profiles.md says
    /// why each).
    pub const MODELED: Errata = Errata::BDM106
        .union(Errata::TGL052)
        .union(Errata::BDM70)
        .union(Errata::SKL014)
        .union(Errata::APL11)
        .union(Errata::APL12);

    /// Applies one entry of an erratum list (`errata = [...]`, `--errata`) to `self`: `NAME`
    /// adds that erratum, `-NAME` removes it, `none` removes them all (CP2).
    pub fn edit(self, entry: &str) -> Result<Errata, UnknownErratum> {
        let entry = entry.trim();
        if entry.eq_ignore_ascii_case("none") {
            return Ok(Errata::empty());
        }
        let (remove, id) = match entry.strip_prefix('-') {
            Some(id) => (true, id),
            None => (false, entry.strip_prefix('+').unwrap_or(entry)),
        };
        let flag = Errata::from_id(id).ok_or_else(|| UnknownErratum {
            id: entry.to_string(),
        })?;
        Ok(if remove { self - flag } else { self | flag })
    }

    /// The errata Intel lists for a part, as decoders apply their workarounds (CP2: the models
    /// of libipt 2.1.2's `pt_cpu_errata`), plus BDM106 for the Broadwell models Linux names.
    pub fn of_part(part: CpuSignature) -> Errata {
        match (part.family, part.model) {
            (6, model) => Errata::of_family_6(model),
            (0x13, 0x01) => Errata::BDM70 | Errata::SKD022 | Errata::SKZ84,
            _ => Errata::empty(),
        }
    }

    fn of_family_6(model: u8) -> Errata {
        match model {
            0x3d | 0x47 | 0x4f | 0x56 => Errata::BDM70 | Errata::BDM64 | Errata::BDM106,
            0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => {
                Errata::BDM70
                    | Errata::SKD007
                    | Errata::SKD010
                    | Errata::SKD022
                    | Errata::SKL014
                    | Errata::SKL168
            }
            0x55 | 0x6a | 0x6c => Errata::BDM70 | Errata::SKL014 | Errata::SKD022 | Errata::SKZ84,
            0x8f | 0xcf | 0xad | 0xae => Errata::BDM70 | Errata::SKD022 | Errata::SKZ84,
            0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8 => Errata::BDM70 | Errata::SKL014 | Errata::SKD022,
            0x97 | 0x9a | 0xba | 0xb7 | 0xbf | 0xc5 | 0xc6 | 0xb5 | 0xaa | 0xac | 0xbd | 0xcc => {
                Errata::BDM70 | Errata::SKD022 | Errata::APL11
            }
            0x5c | 0x5f => Errata::APL11 | Errata::APL12,
            0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd => Errata::APL11,
            _ => Errata::empty(),
        }
    }
}

/// The four registers of one CPUID sub-leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuidRegs {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// The CPU's identity as CPUID leaf 1 gives it (display family and model): what decoders are
/// told to apply their errata workarounds (libipt's `pt_config.cpu`, ptxed `--cpu f/m/s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CpuSignature {
    /// Family (6 for every Core and Atom part here).
    pub family: u16,
    /// Model, extended bits included (0x5E for a Skylake desktop part).
    pub model: u8,
    /// Stepping.
    pub stepping: u8,
}

/// What a logical processor reports about Intel PT output, and the errata it has.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuProfile {
    /// Profile name, e.g. `skylake`.
    pub name: String,
    /// CPUID.(EAX=7,ECX=0):EBX\[25\]: Intel PT is present (M1).
    pub pt_supported: bool,
    /// CPUID.(EAX=14H,ECX=0).
    pub leaf14_0: CpuidRegs,
    /// CPUID.(EAX=14H,ECX=1).
    pub leaf14_1: CpuidRegs,
    /// CPUID.80000008H:EAX\[7:0\].
    pub maxphyaddr: u8,
    /// Linear-address width for canonical checks of ADDRn (48, or 57 with 5-level paging).
    pub linear_address_bits: u8,
    /// The part's errata (CP2): what decoders are told to work around; the
    /// [`Errata::MODELED`] ones also shape the output.
    pub errata: Errata,
    /// Single-entry ToPA (MENTRY=0) only: the PMI of an INT region fires when at most this many
    /// bytes of the region remain (P4). ptemu's default is 512, Linux's `TOPA_PMI_MARGIN`.
    pub early_pmi_margin: u32,
    /// How this CPU lays packets out in its output (spec/hardware.md): the layout measured on
    /// Skylake for `skylake` and the later client and server cores, none for the others.
    pub packing: Packing,
    /// Which packets this CPU chooses where the SDM leaves a choice (spec/hardware.md HW6-HW10).
    pub style: PacketStyle,
    /// The part the profile's values were read from (spec/cpu-profiles.md); none for
    /// `generic-max`, which is no real part.
    pub signature: Option<CpuSignature>,
}

/// The packet choices of a CPU family where the SDM allows several (spec/hardware.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum PacketStyle {
    /// The SDM's rules with ptemu's own choices: shortest IP forms, PSB+ in the order of
    /// spec/generation.md PSB1, PSB+ without FUP at enable, OVF then FUP.
    #[default]
    Sdm,
    /// As measured on Skylake: PSB+ order MODE.TSX, MODE.Exec, FUP, PIP, VMCS, CBR; FUP,
    /// TIP.PGE and TIP.PGD never compressed, no update-48, the first TIP after a PSB not
    /// compressed; enable as PSB+ with FUP then TIP.PGE; OVF then PSB+; PSB every 15/16 period.
    Skylake,
    /// Skylake's choices, with FUP and TIP.PGE carrying the full 64-bit IP (IPBytes 6).
    IceLake,
}

impl PacketStyle {
    /// The layout a CPU of this style writes: the hardware one for the measured styles, none for
    /// the SDM's.
    pub fn packing(self) -> Packing {
        match self {
            PacketStyle::Sdm => Packing::None,
            PacketStyle::Skylake | PacketStyle::IceLake => Packing::Hardware,
        }
    }
}

/// An unknown profile name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown CPU profile `{name}` (known: {})", CpuProfile::NAMES.join(", "))]
pub struct UnknownProfile {
    /// The name asked for.
    pub name: String,
}

/// Default early-PMI margin for single-entry ToPA parts (P4, Q11).
pub const DEFAULT_EARLY_PMI_MARGIN: u32 = 512;

impl CpuProfile {
    /// Names of the built-in profiles.
    pub const NAMES: &'static [&'static str] = &[
        "broadwell",
        "skylake",
        "goldmont",
        "icelake",
        "alderlake",
        "sapphirerapids",
        "generic-max",
    ];

    /// The built-in profile named `name`.
    pub fn named(name: &str) -> Result<Self, UnknownProfile> {
        let (l0, l1, maxphyaddr, la) = match name {
            // Sources for every value: spec/cpu-profiles.md.
            "broadwell" => (regs(0, 0x1, 0x1, 0), regs(0, 0, 0, 0), 39, 48),
            "skylake" => (regs(1, 0xf, 0x7, 0), regs(0x0249_0002, 0x003f_3fff, 0, 0), 39, 48),
            "goldmont" => (
                regs(1, 0xf, 0x8000_0007, 0),
                regs(0x0249_0002, 0x003f_ffff, 0, 0),
                39,
                48,
            ),
            "icelake" => (regs(1, 0xf, 0x7, 0), regs(0x0249_0002, 0x003f_1fff, 0, 0), 39, 48),
            "alderlake" => (
                regs(1, 0x5f, 0x7, 0),
                regs(0x0249_0002, 0x003f_003f, 0, 0),
                46,
                48,
            ),
            "sapphirerapids" => (
                regs(1, 0x5f, 0x7, 0),
                regs(0x0249_0002, 0x003f_003f, 0, 0),
                52,
                57,
            ),
            "generic-max" => (
                regs(1, 0x1ff, 0xf, 0),
                regs(0xffff_0004, 0xffff_ffff, 0, 0),
                52,
                57,
            ),
            _ => {
                return Err(UnknownProfile {
                    name: name.to_string(),
                })
            }
        };
        // spec/cpu-profiles.md: the CPUID signature of the part each profile was read from.
        let signature = |model: u8, stepping: u8| {
            Some(CpuSignature {
                family: 6,
                model,
                stepping,
            })
        };
        let signature = match name {
            "broadwell" => signature(0x3d, 4),
            "skylake" => signature(0x5e, 3),
            "goldmont" => signature(0x5c, 9),
            "icelake" => signature(0x7e, 5),
            "alderlake" => signature(0x97, 2),
            "sapphirerapids" => signature(0x8f, 8),
            _ => None,
        };
        // spec/hardware.md: the cores measured on (Skylake) or after them (Ice Lake and later).
        let style = match name {
            "skylake" => PacketStyle::Skylake,
            "icelake" | "alderlake" | "sapphirerapids" => PacketStyle::IceLake,
            _ => PacketStyle::Sdm,
        };
        // CP2: the errata of the part, on by default; TGL052 stays opt-in (spec/cpu-profiles.md).
        let errata = signature.map_or(Errata::empty(), Errata::of_part);
        Ok(CpuProfile {
            name: name.to_string(),
            pt_supported: true,
            leaf14_0: l0,
            leaf14_1: l1,
            maxphyaddr,
            linear_address_bits: la,
            errata,
            early_pmi_margin: DEFAULT_EARLY_PMI_MARGIN,
            packing: style.packing(),
            style,
            signature,
        })
    }

    /// Sub-leaf 0 EBX as flags.
    pub fn ebx(&self) -> Leaf14Ebx {
        Leaf14Ebx::from_bits_retain(self.leaf14_0.ebx)
    }

    /// Sub-leaf 0 ECX as flags.
    pub fn ecx(&self) -> Leaf14Ecx {
        Leaf14Ecx::from_bits_retain(self.leaf14_0.ecx)
    }

    /// RANGECNT: the number of ADDRn ranges (sub-leaf 1 EAX\[2:0\]).
    pub fn range_count(&self) -> usize {
        (self.leaf14_1.eax & 0x7) as usize
    }

    /// Allowed MTCFreq encodings (sub-leaf 1 EAX\[31:16\]).
    pub fn mtc_periods(&self) -> u16 {
        (self.leaf14_1.eax >> 16) as u16
    }

    /// Allowed CycThresh encodings (sub-leaf 1 EBX\[15:0\]).
    pub fn cyc_thresholds(&self) -> u16 {
        self.leaf14_1.ebx as u16
    }

    /// Allowed PSBFreq encodings (sub-leaf 1 EBX\[31:16\]).
    pub fn psb_periods(&self) -> u16 {
        (self.leaf14_1.ebx >> 16) as u16
    }

    /// CPUID.14H.0:ECX\[1\] = 0: ToPA tables hold a single output entry (T8, P4).
    pub fn single_entry_topa(&self) -> bool {
        !self.ecx().contains(Leaf14Ecx::TOPA_MULTI)
    }

    /// Whether the profile has `erratum`.
    pub fn has(&self, erratum: Errata) -> bool {
        self.errata.contains(erratum)
    }

    /// Mask of physical-address bits at or above MAXPHYADDR.
    pub fn above_maxphyaddr(&self) -> u64 {
        if self.maxphyaddr >= 64 {
            0
        } else {
            !0u64 << self.maxphyaddr
        }
    }
}

crate::with_setters!(CpuProfile {
    with_name => name: String,
    with_pt_supported => pt_supported: bool,
    with_leaf14_0 => leaf14_0: CpuidRegs,
    with_leaf14_1 => leaf14_1: CpuidRegs,
    with_maxphyaddr => maxphyaddr: u8,
    with_linear_address_bits => linear_address_bits: u8,
    with_errata => errata: Errata,
    with_early_pmi_margin => early_pmi_margin: u32,
    with_packing => packing: Packing,
    with_style => style: PacketStyle,
});

impl Default for CpuProfile {
    fn default() -> Self {
        CpuProfile::named("generic-max").expect("generic-max is built in")
    }
}

impl fmt::Display for CpuProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

const fn regs(eax: u32, ebx: u32, ecx: u32, edx: u32) -> CpuidRegs {
    CpuidRegs { eax, ebx, ecx, edx }
}
