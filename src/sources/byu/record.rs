//! The BYU V1.0 record: 6 bytes, u32 big-endian physical address, byte enables, control.

/// Bytes per record.
pub const RECORD_LEN: usize = 6;

/// The bus cycle type, `control >> 4` (BYU Address Trace Specification V1.0). Six of the sixteen
/// values are invalid: they read and write back unchanged, and the event mapping rejects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CycleType {
    /// 0: invalid.
    Invalid0 = 0,
    /// 1: interrupt acknowledge.
    IntAck = 1,
    /// 2: invalid.
    Invalid2 = 2,
    /// 3: special bus cycle (which one is in the byte enables).
    Special = 3,
    /// 4: invalid.
    Invalid4 = 4,
    /// 5: I/O read.
    IoRead = 5,
    /// 6: invalid.
    Invalid6 = 6,
    /// 7: I/O write.
    IoWrite = 7,
    /// 8: instruction fetch (cacheable).
    Fetch = 8,
    /// 9: non-cacheable instruction fetch (every fetch of a complete trace).
    FetchNc = 9,
    /// 10: invalid (code write).
    Invalid10 = 10,
    /// 11: invalid (code write).
    Invalid11 = 11,
    /// 12: data read (cacheable).
    DataRead = 12,
    /// 13: non-cacheable data read (every read of a complete trace).
    DataReadNc = 13,
    /// 14: data write-back (burst).
    Writeback = 14,
    /// 15: data write (single).
    DataWrite = 15,
}

impl CycleType {
    /// All sixteen, by value.
    pub const ALL: [CycleType; 16] = [
        CycleType::Invalid0,
        CycleType::IntAck,
        CycleType::Invalid2,
        CycleType::Special,
        CycleType::Invalid4,
        CycleType::IoRead,
        CycleType::Invalid6,
        CycleType::IoWrite,
        CycleType::Fetch,
        CycleType::FetchNc,
        CycleType::Invalid10,
        CycleType::Invalid11,
        CycleType::DataRead,
        CycleType::DataReadNc,
        CycleType::Writeback,
        CycleType::DataWrite,
    ];

    /// The type in the upper nibble of a control byte.
    #[inline]
    pub fn from_control(control: u8) -> CycleType {
        CycleType::ALL[usize::from(control >> 4)]
    }

    /// The 4-bit value.
    #[inline]
    pub fn value(self) -> u8 {
        self as u8
    }

    /// Whether the specification defines this type (0, 2, 4, 6, 10 and 11 are invalid).
    #[inline]
    pub fn is_valid(self) -> bool {
        !matches!(
            self,
            CycleType::Invalid0
                | CycleType::Invalid2
                | CycleType::Invalid4
                | CycleType::Invalid6
                | CycleType::Invalid10
                | CycleType::Invalid11
        )
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CycleType::IntAck => "int_ack",
            CycleType::Special => "special",
            CycleType::IoRead => "io_read",
            CycleType::IoWrite => "io_write",
            CycleType::Fetch => "fetch_cacheable",
            CycleType::FetchNc => "fetch_noncacheable",
            CycleType::DataRead => "data_read_cacheable",
            CycleType::DataReadNc => "data_read_noncacheable",
            CycleType::Writeback => "data_writeback",
            CycleType::DataWrite => "data_write_single",
            _ => "invalid",
        }
    }
}

/// Which special bus cycle a type-3 record is, from its byte enables (Pentium/K5 encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecialCycle {
    /// BE `FE`: shutdown (triple fault).
    Shutdown,
    /// BE `FD`: cache invalidate (INVD).
    Invalidate,
    /// BE `FB`: HLT (or stop grant, which the address tells apart; both stop the core).
    Halt,
    /// BE `F7`: write-back and invalidate (WBINVD).
    WritebackInvalidate,
    /// BE `EF`: flush acknowledge.
    FlushAck,
    /// BE `DF`: branch trace message (its target travelled on the data bus, not recorded).
    BranchTrace,
    /// Any other byte-enable pattern.
    Other(u8),
}

impl SpecialCycle {
    /// The special cycle named by `byte_enables`.
    #[inline]
    pub fn from_byte_enables(byte_enables: u8) -> SpecialCycle {
        match byte_enables {
            0xfe => SpecialCycle::Shutdown,
            0xfd => SpecialCycle::Invalidate,
            0xfb => SpecialCycle::Halt,
            0xf7 => SpecialCycle::WritebackInvalidate,
            0xef => SpecialCycle::FlushAck,
            0xdf => SpecialCycle::BranchTrace,
            other => SpecialCycle::Other(other),
        }
    }

    /// The byte enables that encode it.
    pub fn byte_enables(self) -> u8 {
        match self {
            SpecialCycle::Shutdown => 0xfe,
            SpecialCycle::Invalidate => 0xfd,
            SpecialCycle::Halt => 0xfb,
            SpecialCycle::WritebackInvalidate => 0xf7,
            SpecialCycle::FlushAck => 0xef,
            SpecialCycle::BranchTrace => 0xdf,
            SpecialCycle::Other(be) => be,
        }
    }
}

/// One 6-byte record, fields as stored. The C layout (address, byte enables, control, two bytes
/// of padding: 8 bytes) lets the block decoder build records with byte shuffles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Record {
    /// Physical address of the 8-byte bus quantum (big-endian on disk).
    pub addr: u32,
    /// BE7#..BE0# as levels: bit `i` = 0 means byte `i` of the quantum is requested.
    pub byte_enables: u8,
    /// Control byte: the cycle type in the upper nibble; the lower nibble is kept but unused.
    pub control: u8,
}

impl Record {
    /// Decodes the stored bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; RECORD_LEN]) -> Record {
        Record {
            addr: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            byte_enables: b[4],
            control: b[5],
        }
    }

    /// The stored bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let a = self.addr.to_be_bytes();
        [a[0], a[1], a[2], a[3], self.byte_enables, self.control]
    }

    /// A record of `cycle` at `addr` with `byte_enables` and a zero low control nibble.
    pub fn new(addr: u32, byte_enables: u8, cycle: CycleType) -> Record {
        Record {
            addr,
            byte_enables,
            control: cycle.value() << 4,
        }
    }

    /// The cycle type.
    #[inline]
    pub fn cycle_type(&self) -> CycleType {
        CycleType::from_control(self.control)
    }

    /// The requested bytes of the quantum as a bit mask (bit `i` = byte `i`).
    #[inline]
    pub fn requested(&self) -> u8 {
        !self.byte_enables
    }

    /// Offset of the lowest requested byte in the quantum (0 when none is requested).
    #[inline]
    pub fn byte_offset(&self) -> u8 {
        let r = self.requested();
        if r == 0 {
            0
        } else {
            r.trailing_zeros() as u8
        }
    }

    /// Number of requested bytes (assumes the enabled bytes are contiguous, as bus cycles are).
    #[inline]
    pub fn byte_len(&self) -> u8 {
        self.requested().count_ones() as u8
    }

    /// The exact byte address: the quantum address plus the lowest requested byte's offset.
    #[inline]
    pub fn byte_addr(&self) -> u32 {
        self.addr.wrapping_add(u32::from(self.byte_offset()))
    }

    /// The special cycle, for a type-3 record.
    #[inline]
    pub fn special(&self) -> Option<SpecialCycle> {
        (self.cycle_type() == CycleType::Special).then(|| SpecialCycle::from_byte_enables(self.byte_enables))
    }
}
