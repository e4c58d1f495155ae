//! The ToPA entry (pt-output.md §5.1) and the per-entry rules checked when the walk reaches it.

use super::violation::Violation;
use crate::memory::{MemError, PhysMemory};
use crate::regs::CpuProfile;
use crate::rules::Rule;
use modular_bitfield::prelude::*;

pub use crate::regs::output::MAX_INDEX;

/// One 64-bit ToPA table entry, bit-exact.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TopaEntry {
    /// Bit 0: the base is the next ToPA table, not an output region.
    pub end: bool,
    /// Bit 1: reserved.
    pub reserved1: bool,
    /// Bit 2: raise a ToPA PMI when the region fills.
    pub int: bool,
    /// Bit 3: reserved.
    pub reserved3: bool,
    /// Bit 4: stop tracing when the region fills.
    pub stop: bool,
    /// Bit 5: reserved.
    pub reserved5: bool,
    /// Bits 9:6: region size is 4 KiB << size (ignored when END=1).
    pub size: B4,
    /// Bits 11:10: reserved.
    pub reserved10: B2,
    /// Bits 63:12: physical address >> 12 (bits at or above MAXPHYADDR are reserved).
    pub base_hi: B52,
}

impl TopaEntry {
    /// Bits 1, 3, 5, 11:10: reserved on every CPU.
    pub const RESERVED: u64 = 1 << 1 | 1 << 3 | 1 << 5 | 0b11 << 10;

    /// An output-region entry.
    pub fn region(base: u64, size_code: u8) -> Self {
        Self::from(base & !0xfff).with_size(size_code)
    }

    /// An END entry pointing at the table at `next_table`.
    pub fn end_to(next_table: u64) -> Self {
        Self::from(next_table & !0xfff).with_end(true)
    }

    /// The physical address in the Base field.
    pub fn base(self) -> u64 {
        u64::from(self) & !0xfff
    }

    /// Region size in bytes: 4 KiB << Size.
    pub fn region_size(self) -> u64 {
        4096 << self.size()
    }

    /// The raw 64-bit value.
    pub fn bits(self) -> u64 {
        u64::from(self)
    }
}

/// Checks an entry when the walk makes it current (E1a, E1b, E1d: T4–T8).
///
/// `table` is the table holding the entry and `index` its index there.
pub fn check_entry(cpu: &CpuProfile, table: u64, index: u32, e: TopaEntry) -> Result<(), Violation> {
    let fail = |rule, msg: String| Err(Violation::at_entry(rule, table, index, e.bits(), msg));
    let reserved = e.bits() & TopaEntry::RESERVED;
    if reserved != 0 {
        return fail(Rule::E1a, format!("reserved bits {reserved:#x} set"));
    }
    if e.bits() & cpu.above_maxphyaddr() != 0 {
        return fail(
            Rule::T7,
            format!(
                "base {:#x} has bits at or above MAXPHYADDR {}",
                e.base(),
                cpu.maxphyaddr
            ),
        );
    }
    if e.end() {
        if e.int() || e.stop() {
            return fail(Rule::T5, "END entry with INT or STOP".into());
        }
        if index == 0 {
            return fail(Rule::T6, "END in entry 0 of a table".into());
        }
    } else if e.base() & (e.region_size() - 1) != 0 {
        return fail(
            Rule::T4,
            format!(
                "region base {:#x} not aligned to its size {}",
                e.base(),
                size_name(e.region_size())
            ),
        );
    }
    if cpu.single_entry_topa() {
        let ok = match index {
            0 => true,
            1 => e.end() && e.base() == table,
            _ => false,
        };
        if !ok {
            return fail(
                Rule::T8,
                "single-entry ToPA: entry 0 is the only region and entry 1 must be END back to the table"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Why an entry cannot become current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    /// Reading the entry failed in host memory.
    Mem(MemError),
    /// The entry breaks a rule: an operational error.
    Rule(Violation),
}

impl From<MemError> for EntryError {
    fn from(e: MemError) -> Self {
        EntryError::Mem(e)
    }
}

/// The output entry the walk makes current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CurrentEntry {
    /// Table holding it.
    pub table: u64,
    /// Its index.
    pub index: u32,
    /// The entry (never END).
    pub entry: TopaEntry,
    /// It was reached through an END entry, so the output offset restarts at 0 (W4).
    pub hopped: bool,
}

/// Makes `table[index]` current, as the unit and `layout check` both do: the entry is read from
/// memory (T1) and checked (T9 policy); an END entry is followed at once to entry 0 of the next
/// table, which is checked too (W4, W6). T6 forbids END in entry 0, so one hop always lands on a
/// region or an error and the walk cannot loop.
pub fn current_entry<M: PhysMemory>(
    cpu: &CpuProfile,
    mem: &M,
    table: u64,
    index: u32,
) -> Result<CurrentEntry, EntryError> {
    let read = |t: u64, i: u32| -> Result<TopaEntry, MemError> {
        Ok(TopaEntry::from(mem.read_u64(t + 8 * u64::from(i))?))
    };
    let entry = read(table, index)?;
    check_entry(cpu, table, index, entry).map_err(EntryError::Rule)?;
    if !entry.end() {
        return Ok(CurrentEntry {
            table,
            index,
            entry,
            hopped: false,
        });
    }
    let next = entry.base();
    let entry = read(next, 0)?;
    check_entry(cpu, next, 0, entry).map_err(EntryError::Rule)?;
    Ok(CurrentEntry {
        table: next,
        index: 0,
        entry,
        hopped: true,
    })
}

/// Human size of a region: `4K`, `2M`, `128M`.
pub fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bits_match_the_sdm_layout() {
        let e = TopaEntry::region(0x1234_5000, 9).with_int(true).with_stop(true);
        assert_eq!(e.bits(), 0x1234_5000 | 9 << 6 | 1 << 2 | 1 << 4);
        assert_eq!(e.region_size(), 2 << 20);
        assert_eq!(TopaEntry::end_to(0x7000).bits(), 0x7001);
        assert_eq!(
            TopaEntry::from(0xfff).bits() & TopaEntry::RESERVED,
            0b1100_0010_1010
        );
        assert_eq!(TopaEntry::region(0, 15).region_size(), 128 << 20);
    }
}
