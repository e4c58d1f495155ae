//! The mapping of bus cycles to tracer events, shared by both BYU formats (spec/mapping.md).

use super::bus::{BusOp, DataKind};
use super::record::SpecialCycle;
use crate::packet::PtwSize;
use crate::tracer::{Event, ExecMode, FarKind};

/// The vector reported for an INTA cycle: the real one travelled on the data bus, which BACH
/// did not record; 0x20 is the first vector above the exceptions (the usual PIC base).
pub const INTA_VECTOR: u8 = 0x20;
/// The C-state a HLT enters, in MWAIT-hint encoding (0 = C1).
pub const HLT_STATE: u8 = 0;
/// PWRX wake reason for a wake from HLT: an interrupt.
pub const WAKE_INTERRUPT: u8 = 1;
/// Interrupted IPs remembered to recognise the return from a handler (older ones are dropped).
const IRET_DEPTH: usize = 64;

/// The PTWRITE payload for a data or I/O access: bits 31:0 the byte address (or port), 39:32 the
/// length in bytes, 47:40 the [`DataKind`].
pub fn ptw_payload(kind: DataKind, addr: u32, len: u8) -> u64 {
    u64::from(addr) | u64::from(len) << 32 | u64::from(kind as u8) << 40
}

/// Counters of the mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FlowCounts {
    pub fetch: u64,
    pub data_read: u64,
    pub data_write: u64,
    pub io: u64,
    pub int_ack: u64,
    pub special: u64,
    pub halt: u64,
    pub other: u64,
    pub discontinuities: u64,
    pub interrupts: u64,
    pub irets: u64,
}

/// Fetch-stream state: one fetched unit is held back until the next fetch says whether the flow
/// went on sequentially (a `Retire`) or was redirected (the unit ends in a jump).
#[derive(Debug)]
pub(crate) struct Flow {
    state: State,
    /// Interrupted IPs, to recognise the returns from their handlers.
    irets: Vec<u64>,
}

/// The part of [`Flow`] a batch keeps in locals (registers, once inlined): everything but the
/// IRET stack.
#[derive(Clone, Copy, Debug)]
struct State {
    /// Bytes per fetch unit: a fetch at `a` brings `a .. (a | (unit - 1)) + 1`.
    unit: u64,
    pending: Option<u64>,
    ip: u64,
    started: bool,
    interrupt_from: Option<u64>,
    halted: bool,
    counts: FlowCounts,
}

/// A [`Flow`] during one batch ([`Flow::batch`]): its state copied out, so that the compiler can
/// keep it in registers across the records instead of loading and storing it for each one.
pub(crate) struct Local<'a> {
    state: State,
    irets: &'a mut Vec<u64>,
}

impl Flow {
    pub(crate) fn new(unit: u64) -> Flow {
        Flow {
            state: State {
                unit,
                pending: None,
                ip: 0,
                started: false,
                interrupt_from: None,
                halted: false,
                counts: FlowCounts::default(),
            },
            irets: Vec::with_capacity(IRET_DEPTH),
        }
    }

    /// The counters so far.
    pub(crate) fn counts(&self) -> &FlowCounts {
        &self.state.counts
    }

    /// Runs `f` (the mapping of a batch of records) on a [`Local`] copy of the state, written back
    /// when `f` returns, whatever it returns.
    #[inline(always)]
    pub(crate) fn batch<T>(&mut self, f: impl FnOnce(&mut Local<'_>) -> T) -> T {
        let mut local = Local {
            state: self.state,
            irets: &mut self.irets,
        };
        let r = f(&mut local);
        self.state = local.state;
        r
    }

    /// Maps one bus cycle preceded by `cycles` core cycles (the readers map whole batches with
    /// [`Flow::batch`]; the tests map one record at a time with this).
    #[cfg(test)]
    pub(crate) fn op(&mut self, op: BusOp, cycles: u64, out: &mut Vec<Event>) {
        self.batch(|f| {
            f.elapse(cycles, out);
            f.apply(op, out);
        })
    }

    /// At the end of the input: retires the held-back unit.
    pub(crate) fn finish(&mut self, out: &mut Vec<Event>) {
        self.batch(|f| f.flush(out));
    }
}

impl Local<'_> {
    #[inline(always)]
    fn unit_end(&self, a: u64) -> u64 {
        (a | (self.state.unit - 1)) + 1
    }

    fn far(kind: FarKind, from: u64, to: u64) -> Event {
        Event::far(kind, from, to, 0, ExecMode::Bits32)
    }

    /// Retires the held-back unit up to its end.
    #[inline(always)]
    fn flush(&mut self, out: &mut Vec<Event>) {
        if let Some(p) = self.state.pending.take() {
            let end = self.unit_end(p);
            out.push(Event::Retire {
                ip: p,
                len: (end - p) as u8,
            });
            self.state.ip = end;
        }
    }

    /// The `cycles` core cycles before a bus cycle: a wake from HLT, or cycles passing.
    #[inline(always)]
    pub(crate) fn elapse(&mut self, cycles: u64, out: &mut Vec<Event>) {
        if self.state.halted {
            self.state.halted = false;
            out.push(Event::Wake {
                last: HLT_STATE,
                deepest: HLT_STATE,
                wake: WAKE_INTERRUPT,
                cycles,
            });
        } else if cycles > 0 {
            out.push(Event::Cycles(cycles));
        }
    }

    /// Maps one bus cycle (after [`Local::elapse`]).
    #[inline(always)]
    pub(crate) fn apply(&mut self, op: BusOp, out: &mut Vec<Event>) {
        let st = &mut self.state;
        match op {
            BusOp::Fetch { addr, .. } => self.fetch(u64::from(addr), out),
            BusOp::Data { kind, addr, len } => {
                if kind.is_io() {
                    st.counts.io += 1;
                } else if kind.is_write() {
                    st.counts.data_write += 1;
                } else {
                    st.counts.data_read += 1;
                }
                out.push(Event::Ptwrite {
                    ip: st.pending.unwrap_or(st.ip),
                    len: 0,
                    payload: ptw_payload(kind, addr, len),
                    size: PtwSize::Eight,
                });
            }
            BusOp::IntAck => {
                st.counts.int_ack += 1;
                self.flush(out);
                // Pentium runs two INTA cycles per interrupt: the second adds nothing.
                self.state.interrupt_from.get_or_insert(self.state.ip);
            }
            BusOp::Special(s) => {
                st.counts.special += 1;
                if s == SpecialCycle::Halt {
                    st.counts.halt += 1;
                    self.flush(out);
                    out.push(Event::Sleep {
                        ip: self.state.ip,
                        state: HLT_STATE,
                        sub_state: 0,
                        hw: false,
                    });
                    self.state.halted = true;
                }
            }
            BusOp::Other => st.counts.other += 1,
        }
    }

    #[inline(always)]
    fn fetch(&mut self, a: u64, out: &mut Vec<Event>) {
        self.state.counts.fetch += 1;
        if let Some(from) = self.state.interrupt_from.take() {
            self.interrupt(from, a, out);
        } else if let Some(p) = self.state.pending {
            if p < a && a <= self.unit_end(p) {
                out.push(Event::Retire {
                    ip: p,
                    len: (a - p) as u8,
                });
            } else {
                self.redirect(p, a, out);
            }
        } else if self.state.started && self.state.ip != a {
            // After a HLT or an INTA-less wake: a redirect from where the flow stopped.
            self.redirect(self.state.ip, a, out);
        }
        self.state.started = true;
        self.state.pending = Some(a);
        self.state.ip = a;
    }

    fn interrupt(&mut self, from: u64, to: u64, out: &mut Vec<Event>) {
        self.state.counts.discontinuities += 1;
        self.state.counts.interrupts += 1;
        if self.irets.len() == IRET_DEPTH {
            self.irets.remove(0);
        }
        self.irets.push(from);
        out.push(Self::far(FarKind::Interrupt { vector: INTA_VECTOR }, from, to));
    }

    #[inline(always)]
    fn redirect(&mut self, from: u64, to: u64, out: &mut Vec<Event>) {
        self.state.counts.discontinuities += 1;
        if self.irets.last() == Some(&to) {
            self.irets.pop();
            self.state.counts.irets += 1;
            out.push(Self::far(FarKind::Iret, from, to));
        } else {
            out.push(Event::IndirectJump { ip: from, target: to });
        }
    }
}
