//! Turning packet generation on and off: TraceEn and TriggerEn at WRMSR (the PSB+, the
//! filter ranges and CR3 match taken from the MSRs), and PacketEn's edges (TIP.PGE, TIP.PGD).

use super::*;

impl Tracer {
    /// PGE1, PGE2: [MODE.Exec] TIP.PGE(ip).
    pub(super) fn enable_packets(&mut self, ip: u64) {
        self.cyc();
        let now = (self.arch.mode, self.arch.if_flag && self.ctl.event_en());
        if self.mode_sent != Some(now) {
            self.put_mode_exec();
        }
        self.put_ip(IpKind::TipPge, ip);
    }

    /// PGD3: FUP(CLIP), TIP.PGD() while PacketEn, for a WRMSR that clears TraceEn.
    pub(super) fn disable_packets(&mut self) {
        // The WRMSR is not an event: it comes after the last one.
        self.resolve_overflow(self.hot.events + 1, true);
        if self.overflow.as_ref().is_some_and(|o| o.active) {
            // The overflow ends with the disable: OVF alone tells the decoder tracing stopped.
            // The TNT bits still pending were lost with it.
            self.hot.tnt = Tnt { bits: 0, count: 0 };
            if let Some(p) = self.probe.as_deref_mut() {
                p.cleared(self.hot.tnt_bits, Loss::Overflow);
            }
            self.put(Packet::Ovf);
            if self.packet_en && self.unit.cpu().has(Errata::APL11) {
                // APL11 (CP5): the OVF of an overflow that ends as TraceEn is cleared is
                // followed by a TIP.PGD. A decoder's workaround drops it, so the truth does not
                // list it as a disable.
                self.put_unrecorded(Packet::TipPgd(IpPayload::SUPPRESSED));
            }
            if let Some(o) = self.overflow.as_mut() {
                o.finish(self.hot.events + 1, true, true);
            }
            self.stats.overflows += 1;
        } else if self.packet_en {
            self.flush_tnt();
            self.cyc();
            self.put_ip(IpKind::Fup, self.hot.ip);
            self.put(Packet::TipPgd(IpPayload::SUPPRESSED));
        } else {
            self.flush_tnt();
        }
        self.commit_kinds();
    }

    /// TraceEn 0->1 with TriggerEn: PSB+ or TSC/TMA/CBR (PSB3, TIM1, TIM4), then PGE1.
    pub(super) fn on_enable(&mut self) {
        self.output_lost = false;
        let regs = self.unit.registers();
        self.ctl = regs.ctl;
        self.filter_ranges.clear();
        self.stop_ranges.clear();
        for n in 0..self.unit.cpu().range_count().min(4) {
            let range = (regs.addr[n][0], regs.addr[n][1]);
            match self.ctl.addr_cfg(n) {
                1 => self.filter_ranges.push(range),
                2 => self.stop_ranges.push(range),
                _ => {}
            }
        }
        self.cr3_match = u64::from(regs.cr3_match) & super::filter::CR3_MATCH_MASK;
        self.triggered = regs.status.trigger_en();
        self.packet_en = false;
        if !self.triggered {
            return;
        }
        self.hot.tnt = Tnt { bits: 0, count: 0 };
        if let Some(p) = self.probe.as_deref_mut() {
            p.cleared(self.hot.tnt_bits, Loss::Stopped);
        }
        self.ret.clear();
        self.mode_sent = None; // Table 36-50 case 2d: MODE.Exec with every enable's TIP.PGE
        self.clock.last_cyc = self.clock.cycles();
        self.clock.last_mtc = self.clock.art() >> self.ctl.mtc_freq();
        let enabled_at_ip = self.packet_en_at(self.hot.ip);
        if self.unit.psb_due_on_enable() {
            // HW8, BDM70 (CP3): Skylake sends the enable's PSB+ with MODE.Exec and FUP(IP) in
            // it, then TIP.PGE(IP), which a decoder takes only with its BDM70 workaround; without
            // the erratum the PSB+ comes first, then MODE.Exec and TIP.PGE.
            let bdm70 = enabled_at_ip && self.unit.cpu().has(Errata::BDM70);
            self.psb_plus(bdm70);
            if bdm70 {
                self.skipped_by_workarounds();
            }
        } else {
            // PSB2: PacketByteCnt counts every byte written (spec/output.md Q10); what counts
            // toward the next PSB is the part past the last whole period, not the whole count
            // (which would send a PSB+ right after the enable, however few bytes followed the
            // last one).
            let period = 1u64 << (self.ctl.psb_freq() + 11);
            self.hot.psb_bytes = u64::from(regs.status.packet_byte_cnt()) % period;
            if self.ctl.tsc_en() {
                self.put_tsc();
            }
            self.put(Packet::Cbr {
                ratio: self.clock.core_ratio(),
            });
        }
        if enabled_at_ip {
            self.packet_en = true;
            self.enable_packets(self.hot.ip);
        }
        self.commit_kinds();
    }
}
