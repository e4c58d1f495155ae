//! PSB+ and the context packets: the PSB, its CBR, PIP/VMCS, MODE.TSX, MODE.Exec, TSC and the
//! FUP that follow it (spec/generation.md, PSB rules), and when the next one is due.

use super::*;

impl Tracer {
    /// PSB1, PSB4: the PSB+ for the current settings and state, in the order of the CPU's style
    /// (HW9 for the hardware styles); `ip`: with MODE.Exec and FUP(IP) (PacketEn, or the
    /// Skylake enable shape, HW8).
    pub(super) fn psb_plus(&mut self, ip: bool) {
        self.flush_tnt();
        self.hot.psb_bytes = 0;
        self.put(Packet::Psb);
        self.hot.ip_fresh = true;
        self.ret.clear();
        self.mode_sent = None;
        self.stats.psbs += 1;
        if self.ctl.tsc_en() {
            self.put_tsc();
        }
        if self.hot.style == PacketStyle::Sdm {
            self.psb_cbr();
            self.psb_context();
            self.psb_tsx();
            self.psb_ip(ip);
        } else {
            self.psb_tsx();
            self.psb_ip(ip);
            self.psb_context();
            self.psb_cbr();
        }
        self.put(Packet::PsbEnd);
    }

    pub(super) fn psb_cbr(&mut self) {
        self.put(Packet::Cbr {
            ratio: self.clock.core_ratio(),
        });
    }

    /// PIP (ContextEn and OS) and VMCS (in VMX non-root).
    pub(super) fn psb_context(&mut self) {
        if self.context_en() && self.ctl.os() {
            self.put_pip();
            if let Some(base) = self.arch.vmcs {
                self.put(Packet::Vmcs {
                    base: base & VMCS_BASE_MASK,
                });
            }
        }
    }

    /// MODE.TSX (ContextEn and BranchEn, on a CPU with TSX).
    pub(super) fn psb_tsx(&mut self) {
        if self.context_en() && self.ctl.branch_en() && self.cfg.tsx {
            self.put(Packet::ModeTsx {
                intx: false,
                abrt: false,
            });
        }
    }

    /// MODE.Exec and FUP(IP), when `ip`.
    pub(super) fn psb_ip(&mut self, ip: bool) {
        if ip {
            self.put_mode_exec();
            self.put_ip(IpKind::Fup, self.hot.ip);
        }
    }

    pub(super) fn put_mode_exec(&mut self) {
        let if_ = self.arch.if_flag && self.ctl.event_en();
        let (csl, csd) = self.arch.mode.csl_csd();
        self.put(Packet::ModeExec { csl, csd, if_ });
        self.mode_sent = Some((self.arch.mode, if_));
    }

    pub(super) fn mode_exec_if_changed(&mut self) {
        if self.mode_sent != Some((self.arch.mode, self.arch.if_flag && self.ctl.event_en())) {
            self.put_mode_exec();
        }
    }

    pub(super) fn put_pip(&mut self) {
        self.put(Packet::Pip {
            cr3: self.arch.cr3 & PIP_CR3_MASK,
            nr: false,
        });
    }

    /// TSC, and TMA right after it with MTCEn (TIM1).
    pub(super) fn put_tsc(&mut self) {
        self.put(Packet::Tsc {
            tsc: self.clock.tsc() & TSC_MASK,
        });
        if self.ctl.mtc_en() {
            let (ctc, fc) = self.clock.tma();
            self.put(Packet::Tma {
                ctc,
                fc: fc & TMA_FC_MASK,
            });
        }
    }

    /// Packet bytes between PSBs (PSB2): 2 KiB << PSBFreq; 15/16 of that under a hardware style
    /// (HW11: about 1,920 bytes with PSBFreq = 0 on Skylake).
    #[inline]
    pub(super) fn psb_interval(&self) -> u64 {
        let period = 1u64 << (self.ctl.psb_freq() + 11);
        match self.hot.style {
            PacketStyle::Sdm => period,
            PacketStyle::Skylake | PacketStyle::IceLake => period - period / 16,
        }
    }
}
