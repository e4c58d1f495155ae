//! Writing micro-ops back as text, column-padded like the course's files.

use super::{BranchOutcome, FlagsUse, MemAccess, Uop};
use std::io::{self, Write};

/// Writes a Penn trace one micro-op per line.
#[derive(Debug)]
pub struct UopWriter<W: Write> {
    out: W,
}

impl<W: Write> UopWriter<W> {
    /// A writer into `out` (wrap files in a `BufWriter`).
    pub fn new(out: W) -> Self {
        UopWriter { out }
    }

    /// Writes one line.
    pub fn write_uop(&mut self, u: &Uop) -> io::Result<()> {
        let flags = match u.flags {
            FlagsUse::None => '-',
            FlagsUse::Read => 'R',
            FlagsUse::Write => 'W',
        };
        let branch = match u.branch {
            BranchOutcome::None => '-',
            BranchOutcome::Taken => 'T',
            BranchOutcome::NotTaken => 'N',
        };
        let mem = match u.mem {
            MemAccess::None => '-',
            MemAccess::Load => 'L',
            MemAccess::Store => 'S',
        };
        writeln!(
            self.out,
            "{} {:x} {:>2} {:>2} {:>2} {flags} {branch} {mem} {:>9} {:>12x} {:>12x} {:>12x} {:<8} {}",
            u.index,
            u.pc,
            u.src1,
            u.src2,
            u.dest,
            u.immediate,
            u.mem_addr,
            u.fallthrough,
            u.target,
            u.macro_name,
            u.micro_name
        )
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
