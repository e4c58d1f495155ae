//! Marks (`spec/truth.md`, TR11): the events a decoder reports from packets that do not move
//! the flow (MODE.Exec, MODE.TSX, PIP, VMCS, TraceStop, CBR, PTW, MWAIT, PWRE, PWRX, EXSTOP,
//! CFE with its EVDs), each as the words ptxed prints for it between `[` and `]`, without the
//! IP fields. The truth holds these words, so a check compares text, and the words are the
//! format every decoder is asked to print (spec/truth.md lists them).

use crate::packet::{Packet, PtwSize};
use std::fmt;

/// The words of a mark: short, so a record stays `Copy` (the longest, a VM exit with its vector
/// and two EVD payloads, is 65 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Text {
    len: u8,
    bytes: [u8; Text::MAX],
}

impl Text {
    /// The longest text a mark holds.
    pub const MAX: usize = 80;

    /// `s`, if it fits and has no `]` or line break.
    pub fn new(s: &str) -> Option<Self> {
        if s.len() > Self::MAX || s.bytes().any(|b| b == b']' || b == b'\n' || b == b'\r') {
            return None;
        }
        let mut bytes = [0; Self::MAX];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(Text {
            len: s.len() as u8,
            bytes,
        })
    }

    /// The words.
    pub fn as_str(&self) -> &str {
        // Built from a `&str` only.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// ptxed's words for PWRE: the resolved C-state and sub-state, ` hw` when hardware-initiated.
pub fn pwre_words(state: u64, sub_state: u64, hw: bool) -> String {
    format!("pwre c{state}.{sub_state}{}", if hw { " hw" } else { "" })
}

/// ptxed's words for PWRX: the wake reason (bit 0 interrupt, bit 2 store, bit 3 hardware), the
/// last and the deepest core C-state.
pub fn pwrx_words(last: u64, deepest: u64, wake: u64) -> String {
    let why = if wake & 1 != 0 {
        "int: "
    } else if wake & 4 != 0 {
        "st: "
    } else if wake & 8 != 0 {
        "hw: "
    } else {
        ""
    };
    format!("pwrx {why}c{last} (c{deepest})")
}

/// Event Trace CFE types (the SDM's CFE table).
const CFE_WORDS: [&str; 11] = [
    "",
    "interrupt",
    "iret",
    "smi",
    "rsm",
    "sipi",
    "init",
    "vmentry",
    "vmexit",
    "vmexit",
    "shutdown",
];
const CFE_INTR: u8 = 1;
const CFE_SIPI: u8 = 5;
const CFE_VMEXIT: u8 = 8;
const CFE_VMEXIT_INTR: u8 = 9;
/// EVD types: the page-fault address (CR2), the VM exit qualification and reason.
const EVD_CR2: u8 = 0;
const EVD_VMXQ: u8 = 1;
const EVD_VMXR: u8 = 2;

/// Turns mark packets into their words, in stream order (an EVD's data goes into the CFE after
/// it, as a decoder joins them).
#[derive(Debug, Default)]
pub struct Marker {
    /// The last MODE.Exec's (CS.L, CS.D), outside PSB+.
    mode: Option<(bool, bool)>,
    cr2: Option<u64>,
    vmxq: Option<u64>,
    vmxr: Option<u64>,
}

impl Marker {
    /// The words of `p`, and whether it only restates what a decoder knows (a MODE.Exec with
    /// the mode of the one before it: libipt reports none, a decoder may); `None` for an EVD
    /// (its data waits for the CFE) and for packets that are not marks.
    pub fn mark(&mut self, p: &Packet) -> Option<(Text, bool)> {
        let restated = match *p {
            Packet::ModeExec { csl, csd, .. } => self.mode.replace((csl, csd)) == Some((csl, csd)),
            _ => false,
        };
        Some((self.text(p)?, restated))
    }

    /// The words of `p`; `None` for an EVD (its data waits for the CFE) and for packets that
    /// are not marks.
    pub fn text(&mut self, p: &Packet) -> Option<Text> {
        let s = match *p {
            Packet::ModeExec { csl, csd, .. } => {
                let bits = match (csl, csd) {
                    (true, _) => "64",
                    (false, true) => "32",
                    (false, false) => "16",
                };
                format!("exec mode: {bits}-bit")
            }
            Packet::ModeTsx { intx, abrt } => match (abrt, intx) {
                (true, _) => "aborted".into(),
                (false, true) => "begin transaction".into(),
                (false, false) => "committed".into(),
            },
            Packet::Pip { cr3, nr } => format!(
                "paging, cr3: {:016x}{}",
                cr3 & 0x000f_ffff_ffff_ffe0,
                if nr { ", nr" } else { "" }
            ),
            Packet::Vmcs { base } => format!("vmcs, base: {:016x}", base & 0x000f_ffff_ffff_f000),
            Packet::TraceStop => "stopped".into(),
            Packet::Cbr { ratio } => format!("cbr: {ratio:x}"),
            Packet::Ptw { size, payload, .. } => {
                let payload = match size {
                    PtwSize::Four => payload & 0xffff_ffff,
                    PtwSize::Eight => payload,
                };
                format!("ptwrite: {payload:x}")
            }
            Packet::Mwait { hints, ext } => format!("mwait {hints:x} {ext:x}"),
            Packet::Pwre { state, sub_state, hw } => pwre_words(state.into(), sub_state.into(), hw),
            Packet::Pwrx { last, deepest, wake } => pwrx_words(last.into(), deepest.into(), wake.into()),
            Packet::Exstop { .. } => "exstop".into(),
            Packet::Evd { ty, payload } => {
                match ty {
                    EVD_CR2 => self.cr2 = Some(payload),
                    EVD_VMXQ => self.vmxq = Some(payload),
                    EVD_VMXR => self.vmxr = Some(payload),
                    _ => {}
                }
                return None;
            }
            Packet::Cfe { ty, vector, .. } => {
                let (cr2, vmxq, vmxr) = (self.cr2.take(), self.vmxq.take(), self.vmxr.take());
                let word = CFE_WORDS.get(usize::from(ty)).copied().unwrap_or("");
                match ty {
                    CFE_INTR => match cr2 {
                        Some(a) => format!("interrupt {vector}, cr2: {a:016x}"),
                        None => format!("interrupt {vector}"),
                    },
                    CFE_SIPI => format!("sipi: {vector:x}"),
                    CFE_VMEXIT | CFE_VMEXIT_INTR => {
                        let mut s = String::from("vmexit");
                        if ty == CFE_VMEXIT_INTR {
                            s += &format!(", intr: {vector}");
                        }
                        if let Some(r) = vmxr {
                            s += &format!(", vmxr: {r:016x}");
                        }
                        if let Some(q) = vmxq {
                            s += &format!(", vmxq: {q:016x}");
                        }
                        s
                    }
                    _ if !word.is_empty() => word.into(),
                    _ => format!("cfe type {ty}"),
                }
            }
            _ => return None,
        };
        Text::new(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TR11: the words are ptxed's, as libipt's own tests print them.
    #[test]
    fn tr11_mark_words_are_ptxeds() {
        let mut m = Marker::default();
        let mut t = |p| m.text(&p).map(|t| t.to_string());
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            t(Packet::ModeExec {
                csl: true,
                csd: false,
                if_: true
            }),
            s("exec mode: 64-bit")
        );
        assert_eq!(
            t(Packet::ModeExec {
                csl: false,
                csd: true,
                if_: false
            }),
            s("exec mode: 32-bit")
        );
        assert_eq!(
            t(Packet::ModeTsx {
                intx: true,
                abrt: false
            }),
            s("begin transaction")
        );
        assert_eq!(
            t(Packet::Pip {
                cr3: 0xa000,
                nr: false
            }),
            s("paging, cr3: 000000000000a000")
        );
        assert_eq!(
            t(Packet::Vmcs { base: 0xcdcdc000 }),
            s("vmcs, base: 00000000cdcdc000")
        );
        assert_eq!(t(Packet::TraceStop), s("stopped"));
        assert_eq!(t(Packet::Cbr { ratio: 0xf }), s("cbr: f"));
        assert_eq!(
            t(Packet::Ptw {
                size: PtwSize::Four,
                payload: 0xabcd,
                ip: false
            }),
            s("ptwrite: abcd")
        );
        assert_eq!(t(Packet::Mwait { hints: 0x50, ext: 1 }), s("mwait 50 1"));
        assert_eq!(
            t(Packet::Pwre {
                state: 1,
                sub_state: 0,
                hw: true
            }),
            s("pwre c1.0 hw")
        );
        assert_eq!(
            t(Packet::Pwrx {
                last: 1,
                deepest: 0,
                wake: 8
            }),
            s("pwrx hw: c1 (c0)")
        );
        assert_eq!(t(Packet::Exstop { ip: true }), s("exstop"));
        assert_eq!(
            t(Packet::Evd {
                ty: 0,
                payload: 0x2000
            }),
            None
        );
        assert_eq!(
            t(Packet::Cfe {
                ty: 1,
                vector: 14,
                ip: false
            }),
            s("interrupt 14, cr2: 0000000000002000")
        );
        assert_eq!(
            t(Packet::Cfe {
                ty: 1,
                vector: 32,
                ip: false
            }),
            s("interrupt 32")
        );
        assert_eq!(
            t(Packet::Cfe {
                ty: 2,
                vector: 0,
                ip: false
            }),
            s("iret")
        );
        // A VM exit with its vector and both EVDs, as libipt's ptet test prints it.
        assert_eq!(t(Packet::Evd { ty: 2, payload: 0 }), None);
        assert_eq!(
            t(Packet::Evd {
                ty: 1,
                payload: 0xf00baa
            }),
            None
        );
        assert_eq!(
            t(Packet::Cfe {
                ty: 9,
                vector: 14,
                ip: false
            }),
            s("vmexit, intr: 14, vmxr: 0000000000000000, vmxq: 0000000000f00baa")
        );
        assert_eq!(t(Packet::Psb), None);
    }

    /// TR11: a MODE.Exec that repeats the mode before it restates it (optional).
    #[test]
    fn tr11_an_unchanged_exec_mode_is_a_restatement() {
        let mut m = Marker::default();
        let exec = |csl| Packet::ModeExec {
            csl,
            csd: false,
            if_: false,
        };
        assert_eq!(m.mark(&exec(true)).map(|x| x.1), Some(false));
        assert_eq!(m.mark(&exec(true)).map(|x| x.1), Some(true));
        assert_eq!(m.mark(&exec(false)).map(|x| x.1), Some(false));
        assert_eq!(m.mark(&Packet::Cbr { ratio: 1 }).map(|x| x.1), Some(false));
    }
}
