//! Control transfers: how each kind of branch is reported while tracing stays on (TNT bits,
//! TIPs, compressed returns, far transfers with their event packets), spec/generation.md.

use super::filter::in_any;
use super::*;

/// How a control transfer is reported while tracing stays on, and how it leaves tracing.
#[derive(Clone, Copy, Debug)]
pub(super) enum Cofi {
    /// Straight-line flow (or a non-branch that changes context): only PGE/PGD.
    Linear,
    /// Jcc: a TNT bit.
    Cond(bool),
    /// Direct JMP/CALL: nothing; a call pushes its return address (RET1).
    Direct { push: Option<u64> },
    /// Indirect JMP/CALL: TIP (TIP1).
    Indirect { push: Option<u64> },
    /// RET: TNT 1 when compressible, else TIP (RET2).
    Return,
    /// Far transfer (TIP2, TIP3).
    Far {
        kind: FarKind,
        from: u64,
        cr3_changed: bool,
    },
}

impl Tracer {
    /// Straight-line flow past the instruction at `ip`: FilterEn and TraceStop are checked at the
    /// next IP when ranges are set (FLT2, FLT3).
    #[inline]
    pub(super) fn linear(&mut self, ip: u64, len: u8) {
        self.hot.ip = ip.wrapping_add(u64::from(len));
        if !self.filter_ranges.is_empty() || !self.stop_ranges.is_empty() {
            self.transfer(self.hot.ip, Cofi::Linear);
        }
    }

    /// The common path of every control transfer: PacketEn before and after, and the packets of
    /// each combination (TIP1–TIP3, RET2, PGE1, PGD1, PGD2, FLT3).
    #[inline]
    pub(super) fn transfer(&mut self, to: u64, cofi: Cofi) {
        let pe0 = self.packet_en;
        self.hot.ip = to;
        let stop = !self.stop_ranges.is_empty() && self.context_en() && in_any(&self.stop_ranges, to);
        let pe1 = !stop && self.packet_en_at(to);
        let compress = matches!(cofi, Cofi::Return)
            && !self.ctl.dis_retc()
            && !self.ctl.dis_tnt()
            && self.ret.peek() == Some(to);
        match (pe0, pe1) {
            (true, true) => match cofi {
                Cofi::Linear => {}
                Cofi::Cond(taken) => self.tnt_bit(taken),
                Cofi::Direct { push } => self.push(push),
                Cofi::Indirect { push } => {
                    self.push(push);
                    self.flush_tnt();
                    self.cyc();
                    self.put_ip(IpKind::Tip, to);
                }
                Cofi::Return if compress => {
                    self.ret.pop();
                    self.hot.compressed_returns += 1;
                    self.tnt_bit(true);
                }
                Cofi::Return => {
                    self.flush_tnt();
                    self.cyc();
                    self.put_ip(IpKind::Tip, to);
                }
                Cofi::Far {
                    kind,
                    from,
                    cr3_changed,
                } => {
                    self.flush_tnt();
                    self.event_trace(kind);
                    self.cyc();
                    if kind.is_async() {
                        self.put_ip(IpKind::Fup, from);
                    }
                    if cr3_changed && self.ctl.os() {
                        self.put_pip();
                    }
                    if let (FarKind::VmEntry { .. }, Some(base)) = (kind, self.arch.vmcs) {
                        self.put(Packet::Vmcs {
                            base: base & VMCS_BASE_MASK,
                        });
                    }
                    self.mode_exec_if_changed(); // MODE1
                    self.put_ip(IpKind::Tip, to);
                }
            },
            (true, false) => {
                // PGD1 / PGD2: the IP is suppressed when the context is left, or after a TNT bit.
                let mut with_ip = self.context_en();
                match cofi {
                    Cofi::Cond(taken) => {
                        self.tnt_bit(taken);
                        with_ip = false;
                    }
                    Cofi::Return if compress => {
                        self.ret.pop();
                        self.hot.compressed_returns += 1;
                        self.tnt_bit(true);
                        with_ip = false;
                    }
                    // SKL014 (CP4): a direct JMP/CALL out of the filter ranges sends its TIP.PGD
                    // without the target.
                    Cofi::Direct { .. }
                        if !stop && !self.filter_ranges.is_empty() && self.unit.cpu().has(Errata::SKL014) =>
                    {
                        with_ip = false;
                    }
                    _ => {}
                }
                self.flush_tnt();
                if let Cofi::Far { kind, from, .. } = cofi {
                    self.event_trace(kind);
                    self.cyc();
                    if kind.is_async() {
                        self.put_ip(IpKind::Fup, from);
                    }
                } else {
                    self.cyc();
                }
                if with_ip || stop {
                    self.put_ip(IpKind::TipPgd, to);
                } else {
                    self.put(Packet::TipPgd(IpPayload::SUPPRESSED));
                }
                self.ret.clear(); // RET3: the decoder may or may not have pushed a leaving call
            }
            (false, true) => {
                if let Cofi::Far {
                    cr3_changed: true, ..
                } = cofi
                {
                    if self.ctl.os() {
                        self.put_pip();
                    }
                }
                self.enable_packets(to);
            }
            (false, false) => {
                // PIP1: a far transfer that changes CR3 sends PIP with TriggerEn, ContextEn and
                // OS = 1 even outside the filter ranges (SDM cases 10f-13f).
                if let Cofi::Far {
                    cr3_changed: true, ..
                } = cofi
                {
                    if self.triggered && self.ctl.os() && self.context_en() {
                        self.put_pip();
                    }
                }
            }
        }
        self.packet_en = pe1;
        if stop {
            self.flush_tnt();
            self.put(Packet::TraceStop);
            self.stop_pending = true;
        }
    }

    /// EVT1: EVD(CR2) and CFE before the FUP of an interrupt or exception; CFE(IRET).
    pub(super) fn event_trace(&mut self, kind: FarKind) {
        if !self.ctl.event_en() {
            return;
        }
        let (ty, vector) = match kind {
            FarKind::Exception { vector, cr2 } => {
                if let (PF_VECTOR, Some(addr)) = (vector, cr2) {
                    self.put(Packet::Evd {
                        ty: EVD_CR2,
                        payload: addr,
                    });
                }
                (CFE_INTR, vector)
            }
            FarKind::Interrupt { vector } | FarKind::SoftwareInterrupt { vector } => (CFE_INTR, vector),
            FarKind::Iret => (CFE_IRET, 0),
            _ => return,
        };
        self.put(Packet::Cfe {
            ty,
            vector,
            ip: false,
        });
    }

    pub(super) fn push(&mut self, push: Option<u64>) {
        if let Some(ret) = push {
            self.ret.push(ret);
        }
    }

    /// TNT1, TNT2, TNT4.
    #[inline(always)]
    pub(super) fn tnt_bit(&mut self, taken: bool) {
        if !self.ctl.dis_tnt() && self.hot.add_tnt_bit(taken) == self.tnt_full() {
            self.flush_tnt();
        }
    }

    /// Bits that fill a TNT (TNT4): 6, or 47 with long TNT.
    #[inline]
    pub(super) fn tnt_full(&self) -> u8 {
        if self.cfg.long_tnt {
            47
        } else {
            6
        }
    }

    /// TNT3: the partial TNT goes out (CYC first: the CYC before a TNT times its first branch).
    #[inline]
    pub(super) fn flush_tnt(&mut self) {
        if let Some(p) = self.hot.take_tnt() {
            self.cyc();
            self.put(p);
        }
    }
}
