//! The texts of the notes whose words both sides read (spec/qemu.md QE16, QE21, QE22): the
//! plugin writes them with [`HandlerNote::text`], [`FaultNote::text`] and [`DeathNote::text`],
//! `ptemu run` reads them with their `parse`, so the words are defined once. Words are separated
//! by one space; numbers are decimal but addresses, which are `0x` hex; `-` stands for a word
//! the plugin does not know.

/// A [`crate::NoteKind::Handler`] note's text: the signal a handler was installed for and the
/// handler's restorer (`sa_restorer`, 0 for none), `SIGNO 0xRESTORER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlerNote {
    /// The signal's number.
    pub signo: u64,
    /// The restorer's address (0: none).
    pub restorer: u64,
}

impl HandlerNote {
    /// The note's text.
    pub fn text(&self) -> String {
        format!("{} {:#x}", self.signo, self.restorer)
    }

    /// The words of `text`, each `None` where it is missing or not a number.
    pub fn parse(text: &str) -> (Option<u64>, Option<u64>) {
        let mut w = text.split_whitespace();
        (w.next().and_then(|n| n.parse().ok()), w.next().and_then(hex))
    }
}

/// A [`crate::NoteKind::Fault`] note's text (QE21): what the signal frame of a fault's handler
/// holds, `SIGNO CODE 0xCR2 0xHANDLER 0xBELOW` (BELOW `-` when unreadable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultNote {
    /// The signal's number (0 when the frame holds no siginfo: a handler without SA_SIGINFO).
    pub signo: u32,
    /// Its `si_code` (0 without a siginfo).
    pub code: i32,
    /// The frame's CR2.
    pub addr: u64,
    /// The handler's address.
    pub handler: u64,
    /// The word below the interrupted stack pointer, if it could be read.
    pub below: Option<u64>,
}

impl FaultNote {
    /// The note's text.
    pub fn text(&self) -> String {
        let below = self.below.map_or("-".to_string(), |w| format!("{w:#x}"));
        format!(
            "{} {} {:#x} {:#x} {below}",
            self.signo, self.code, self.addr, self.handler
        )
    }

    /// The note `text` says; `None` when a word but BELOW is missing or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let mut w = text.split_whitespace();
        Some(FaultNote {
            signo: w.next()?.parse().ok()?,
            code: w.next()?.parse().ok()?,
            addr: hex(w.next()?)?,
            handler: hex(w.next()?)?,
            below: w.next().and_then(hex),
        })
    }
}

/// A [`crate::NoteKind::Killed`] or [`crate::NoteKind::Stopped`] note's text (QE22): the signal,
/// the block whose execution began last, and what the plugin knew of the signal:
/// `SIGNO BLOCK CODE 0xADDR`, `SIGNO BLOCK sent N` or `SIGNO BLOCK - -`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeathNote {
    /// The signal's number.
    pub signo: u32,
    /// The index of the block whose execution began last (in no batch: the note stands for it).
    pub block: u32,
    /// What the plugin knew of the signal.
    pub cause: DeathCause,
}

/// What the plugin knew of the signal that killed the program (QE22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeathCause {
    /// A host fault came in the thread's last block: its `si_code` and address.
    Fault {
        /// `si_code`: SEGV_MAPERR, SEGV_ACCERR, SI_KERNEL (a #GP), BUS_ADRERR...
        code: i32,
        /// The address it touched.
        addr: u64,
    },
    /// The signal was sent to the thread (`si_code` <= 0) when its blocks had begun this many
    /// instructions fewer than at its death.
    Sent(u64),
    /// Neither (a stopped thread, a signal QEMU raised itself).
    Unknown,
}

impl DeathNote {
    /// The note's text.
    pub fn text(&self) -> String {
        let cause = match self.cause {
            DeathCause::Fault { code, addr } => format!("{code} {addr:#x}"),
            DeathCause::Sent(since) => format!("sent {since}"),
            DeathCause::Unknown => "- -".to_string(),
        };
        format!("{} {} {cause}", self.signo, self.block)
    }

    /// The note `text` says; `None` when a word is missing or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let mut w = text.split_whitespace();
        let signo = w.next()?.parse().ok()?;
        let block = w.next()?.parse().ok()?;
        let cause = match (w.next()?, w.next()?) {
            ("-", "-") => DeathCause::Unknown,
            ("sent", since) => DeathCause::Sent(since.parse().ok()?),
            (code, addr) => DeathCause::Fault {
                code: code.parse().ok()?,
                addr: hex(addr)?,
            },
        };
        Some(DeathNote { signo, block, cause })
    }
}

/// A hex word, with or without `0x`.
fn hex(w: &str) -> Option<u64> {
    u64::from_str_radix(w.trim_start_matches("0x"), 16).ok()
}
