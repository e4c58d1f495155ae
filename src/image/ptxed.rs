//! The `ptxed` command line that replays a trace over a [`CodeImage`].
//!
//! Option syntax from libipt's `ptxed/src/ptxed.c`: `--pt <file>[:<from>[-<to>]]`,
//! `--raw <file>[:<from>[-<to>]]:<base>`; the configuration options (`--cpu`, `--mtc-freq`,
//! `--nom-freq`, `--cpuid-0x15.eax/ebx`, `--insn-decoder`) only take effect before `--pt`, which
//! allocates the decoder. PTWRITE needs no option: ptxed prints every `ptwrite` event.

use super::CodeImage;

/// Timing parameters a decoder needs to follow MTC and CYC (the values the trace was made with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PtxedTiming {
    /// IA32_RTIT_CTL.MTCFreq.
    pub mtc_freq: u8,
    /// MSR_PLATFORM_INFO\[15:8\], the nominal core:bus ratio.
    pub nom_freq: u8,
    /// CPUID.15H:EAX (TSC:ART denominator).
    pub cpuid_0x15_eax: u32,
    /// CPUID.15H:EBX (TSC:ART numerator).
    pub cpuid_0x15_ebx: u32,
}

/// What ptxed is told about the run beyond the files: the timing parameters, the CPU (its errata
/// workarounds, CP1) and the address filter (its SKL014 workaround, CP4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtxedConfig {
    /// Timing parameters, when the trace has MTC or CYC.
    pub timing: Option<PtxedTiming>,
    /// The part (`--cpu f/m/s`): none for a profile of no real part.
    pub cpu: Option<crate::regs::CpuSignature>,
    /// CTL\[47:32\]: the ADDRn_CFG fields (`--filter:addrN_cfg`); 0: no filter.
    pub filter_cfg: u64,
    /// ADDR0_A ... ADDR3_B (`--filter:addrN_a`, `--filter:addrN_b`).
    pub filter_addr: [u64; 8],
}

/// `arg` quoted for a POSIX shell when it holds anything but `[A-Za-z0-9_./:=@%+,-]`.
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

impl CodeImage {
    /// The arguments (after the program name) of the `ptxed` run that decodes the trace file `pt`
    /// over this image written to the file `image`: libipt's instruction-flow decoder, the CPU
    /// (so ptxed applies that part's errata workarounds), the address filter in use, the timing
    /// parameters when given.
    pub fn ptxed_args(&self, pt: &str, image: &str, config: &PtxedConfig) -> Vec<String> {
        let mut v = vec!["--insn-decoder".to_string()];
        if let Some(c) = config.cpu {
            v.extend([
                "--cpu".to_string(),
                format!("{}/{}/{}", c.family, c.model, c.stepping),
            ]);
        }
        for n in 0..4 {
            let cfg = (config.filter_cfg >> (4 * n)) & 0xf;
            if cfg != 0 {
                v.extend([
                    format!("--filter:addr{n}_cfg"),
                    cfg.to_string(),
                    format!("--filter:addr{n}_a"),
                    format!("{:#x}", config.filter_addr[2 * n]),
                    format!("--filter:addr{n}_b"),
                    format!("{:#x}", config.filter_addr[2 * n + 1]),
                ]);
            }
        }
        if let Some(t) = config.timing {
            v.extend([
                "--mtc-freq".to_string(),
                t.mtc_freq.to_string(),
                "--nom-freq".to_string(),
                t.nom_freq.to_string(),
                "--cpuid-0x15.eax".to_string(),
                t.cpuid_0x15_eax.to_string(),
                "--cpuid-0x15.ebx".to_string(),
                t.cpuid_0x15_ebx.to_string(),
            ]);
        }
        v.extend([
            "--pt".to_string(),
            pt.to_string(),
            "--raw".to_string(),
            format!("{image}:{:#x}", self.base),
        ]);
        v
    }

    /// [`CodeImage::ptxed_args`] as one shell command line, starting with `ptxed`.
    pub fn ptxed_command(&self, pt: &str, image: &str, config: &PtxedConfig) -> String {
        let mut s = String::from("ptxed");
        for a in self.ptxed_args(pt, image, config) {
            s.push(' ');
            s.push_str(&quote(&a));
        }
        s
    }
}
