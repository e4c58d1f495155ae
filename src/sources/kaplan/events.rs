//! Kaplan records as tracer events (spec/mapping.md, "Kaplan page images").

use super::read::Reader;
use crate::packet::PtwSize;
use crate::sources::error::{ErrorKind, Result, SourceError};
use crate::sources::{EventSource, Input, ReadOptions, SourceStats, StartState};
use crate::tracer::{Event, ExecMode, FarKind};

/// The synthetic user IP every page fault is taken at (the classic i386 ELF text start).
pub const FAULT_IP: u64 = 0x0804_8000;
/// The synthetic #PF handler entry.
pub const HANDLER_IP: u64 = 0xc010_0000;
/// Length of the handler's PTWRITE (`F3 0F AE /4` with a register operand).
pub const PTWRITE_LEN: u8 = 4;
/// The #PF vector.
pub const PF_VECTOR: u8 = 14;
/// Bit 1 of an eviction payload: marks it as an eviction.
pub const EVICT_TAG: u64 = 1 << 1;

/// The 4-byte PTWRITE payload of an eviction: bits 31:12 the evicted page's address
/// (`page << 12`, as CR2 gives the faulting one), bit 1 set, bit 0 the dirty bit.
pub fn evict_payload(page: u16, dirty: bool) -> u64 {
    u64::from(page) << 12 | EVICT_TAG | u64::from(dirty)
}

/// Where the Kaplan mapping is approximate.
pub const APPROXIMATIONS: [&str; 5] = [
    "the trace has no IPs: every fault is taken at one synthetic user IP and handled at one synthetic \
     handler IP, which IRETs back",
    "the page number is used as a linear page number (CR2 = page << 12); the real addresses were renumbered",
    "compulsory and re-faults look the same in PT (both are #PF); only the counts tell them apart",
    "evictions have no PT packet: they are PTWRITEs in the handler (page << 12 | 2 | dirty)",
    "page images and time are dropped; references that hit in memory are not in the trace at all",
];

const WORDS: usize = (1 << 16) / 64;

/// A Kaplan trace as tracer events: per record a #PF from [`FAULT_IP`] to [`HANDLER_IP`] with
/// CR2 = page << 12, a PTWRITE for the eviction if any, an IRET back.
#[derive(Debug)]
pub struct KaplanEvents {
    reader: Reader,
    options: ReadOptions,
    seen: Box<[u64; WORDS]>,
    resident: Box<[u64; WORDS]>,
    full: bool,
    skipped: u64,
    counts: [u64; 6],
}

const NAMES: [&str; 6] = [
    "compulsory",
    "refault",
    "evict_dirty",
    "evict_clean",
    "no_evict",
    "inconsistent",
];

fn bit(set: &[u64; WORDS], page: u16) -> bool {
    set[usize::from(page) / 64] >> (page % 64) & 1 == 1
}

fn put(set: &mut [u64; WORDS], page: u16, on: bool) {
    let w = &mut set[usize::from(page) / 64];
    if on {
        *w |= 1 << (page % 64);
    } else {
        *w &= !(1 << (page % 64));
    }
}

impl KaplanEvents {
    /// The events of `input`.
    pub fn new(input: Input, options: ReadOptions) -> Result<Self> {
        Ok(KaplanEvents {
            reader: Reader::new(input),
            options,
            seen: Box::new([0; WORDS]),
            resident: Box::new([0; WORDS]),
            full: false,
            skipped: 0,
            counts: [0; 6],
        })
    }
}

impl EventSource for KaplanEvents {
    fn next_events(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        let r = match self.reader.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(false),
            Err(e) => {
                self.options.skip(e, &mut self.skipped)?;
                return Ok(true);
            }
        };
        let (page, compulsory) = (r.page, r.compulsory);
        let evicted = r.evicted.map(|e| (e.page, e.dirty));
        self.counts[usize::from(!compulsory)] += 1;
        self.counts[match evicted {
            Some((_, true)) => 2,
            Some((_, false)) => 3,
            None => 4,
        }] += 1;
        // The LRU behaviour sequence must be consistent with itself.
        let problem = if compulsory == bit(&self.seen, page) {
            Some(if compulsory {
                format!("page {page:04x} is tagged 'C' (first reference) but was referenced before")
            } else {
                format!("page {page:04x} is tagged 'F' (re-fault) but was never referenced before")
            })
        } else if bit(&self.resident, page) {
            Some(format!("page {page:04x} faults while it is resident"))
        } else if evicted.is_none() && self.full {
            Some("tag 'N' (no eviction) after memory was already full".to_owned())
        } else if let Some((e, _)) = evicted.filter(|&(e, _)| !bit(&self.resident, e) || e == page) {
            Some(format!("evicted page {e:04x} is not resident"))
        } else {
            None
        };
        put(&mut self.seen, page, true);
        put(&mut self.resident, page, true);
        if let Some((e, _)) = evicted {
            put(&mut self.resident, e, e == page);
            self.full = true;
        }
        if let Some(message) = problem {
            self.counts[5] += 1;
            let err = SourceError::at(
                self.reader.name(),
                self.reader.position(),
                ErrorKind::Inconsistent,
                message,
            );
            self.options.skip(err, &mut self.skipped)?;
            return Ok(true);
        }
        let far = |kind, from, to, cpl| Event::far(kind, from, to, cpl, ExecMode::Bits32);
        let exception = FarKind::Exception {
            vector: PF_VECTOR,
            cr2: Some(u64::from(page) << 12),
        };
        out.push(far(exception, FAULT_IP, HANDLER_IP, 0));
        let mut ip = HANDLER_IP;
        if let Some((e, dirty)) = evicted {
            out.push(Event::Ptwrite {
                ip,
                len: PTWRITE_LEN,
                payload: evict_payload(e, dirty),
                size: PtwSize::Four,
            });
            ip += u64::from(PTWRITE_LEN);
        }
        out.push(far(FarKind::Iret, ip, FAULT_IP, 3));
        Ok(true)
    }

    fn start_state(&self) -> StartState {
        StartState {
            mode: ExecMode::Bits32,
            cpl: 3,
            cr3: 0,
        }
    }

    fn stats(&self) -> SourceStats {
        SourceStats {
            format: "kaplan",
            records: self.reader.records(),
            skipped: self.skipped,
            counts: NAMES.iter().copied().zip(self.counts).collect(),
            approximations: APPROXIMATIONS.to_vec(),
        }
    }
}
