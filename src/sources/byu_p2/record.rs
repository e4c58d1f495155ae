//! The BYU `p2AddrTr` record: 12 bytes, little-endian (`byutr.h`).

/// Bytes per record.
pub const RECORD_LEN: usize = 12;

/// The `time` value that is no delta (seen on the first record of real traces).
pub const TIME_SENTINEL: u32 = 0xffff_ffff;

/// The request type (`byutr.h`); values it does not define are kept as [`ReqType::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReqType {
    /// 0x00 FETCH: instruction fetch.
    Fetch,
    /// 0x01 MEMREAD.
    MemRead,
    /// 0x02 MEMREADINV: read for ownership.
    MemReadInv,
    /// 0x03 MEMWRITE.
    MemWrite,
    /// 0x10 IOREAD.
    IoRead,
    /// 0x11 IOWRITE.
    IoWrite,
    /// 0x20 DEFERREPLY.
    DeferReply,
    /// 0x21 INTA: interrupt acknowledge.
    Inta,
    /// 0x22 CNTRLAGNTRES: central agent response.
    CntrlAgntRes,
    /// 0x23 BRTRACEREC: branch trace record.
    BrTraceRec,
    /// 0x31 SHUTDOWN.
    Shutdown,
    /// 0x32 FLUSH.
    Flush,
    /// 0x33 HALT.
    Halt,
    /// 0x34 SYNC.
    Sync,
    /// 0x35 FLUSHACK.
    FlushAck,
    /// 0x36 STOPCLKACK.
    StopClkAck,
    /// 0x37 SMIACK.
    SmiAck,
    /// Any other value, kept as read.
    Unknown(u8),
}

impl ReqType {
    /// Every defined type, with its value and `byutr.h` name.
    pub const DEFINED: [(ReqType, u8, &'static str); 17] = [
        (ReqType::Fetch, 0x00, "FETCH"),
        (ReqType::MemRead, 0x01, "MEMREAD"),
        (ReqType::MemReadInv, 0x02, "MEMREADINV"),
        (ReqType::MemWrite, 0x03, "MEMWRITE"),
        (ReqType::IoRead, 0x10, "IOREAD"),
        (ReqType::IoWrite, 0x11, "IOWRITE"),
        (ReqType::DeferReply, 0x20, "DEFERREPLY"),
        (ReqType::Inta, 0x21, "INTA"),
        (ReqType::CntrlAgntRes, 0x22, "CNTRLAGNTRES"),
        (ReqType::BrTraceRec, 0x23, "BRTRACEREC"),
        (ReqType::Shutdown, 0x31, "SHUTDOWN"),
        (ReqType::Flush, 0x32, "FLUSH"),
        (ReqType::Halt, 0x33, "HALT"),
        (ReqType::Sync, 0x34, "SYNC"),
        (ReqType::FlushAck, 0x35, "FLUSHACK"),
        (ReqType::StopClkAck, 0x36, "STOPCLKACK"),
        (ReqType::SmiAck, 0x37, "SMIACK"),
    ];

    /// The type of a stored byte: one lookup in a table built from [`ReqType::DEFINED`] at compile
    /// time (the record reader's hot path).
    #[inline]
    pub fn from_u8(v: u8) -> ReqType {
        BY_VALUE[usize::from(v)]
    }

    /// The stored byte.
    pub fn to_u8(self) -> u8 {
        match self {
            ReqType::Unknown(v) => v,
            t => ReqType::DEFINED.iter().find(|d| d.0 == t).map_or(0, |d| d.1),
        }
    }

    /// Index into [`ReqType::DEFINED`], `None` for an unknown value.
    pub fn index(self) -> Option<usize> {
        ReqType::DEFINED.iter().position(|d| d.0 == self)
    }

    /// The `byutr.h` name, or "unknown".
    pub fn name(self) -> &'static str {
        self.index().map_or("unknown", |i| ReqType::DEFINED[i].2)
    }
}

/// [`ReqType::from_u8`] for every byte value.
const BY_VALUE: [ReqType; 256] = {
    let mut t = [ReqType::Unknown(0); 256];
    let mut v = 0;
    while v < 256 {
        t[v] = ReqType::Unknown(v as u8);
        v += 1;
    }
    let mut i = 0;
    while i < ReqType::DEFINED.len() {
        let (ty, value, _) = ReqType::DEFINED[i];
        t[value as usize] = ty;
        i += 1;
    }
    t
};

/// One 12-byte record, fields as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// Physical byte address (little-endian on disk).
    pub addr: u32,
    /// Request type.
    pub reqtype: ReqType,
    /// Bytes transferred.
    pub size: u8,
    /// Attributes (low 2 bits: memory type).
    pub attr: u8,
    /// Agent (CPU) id.
    pub proc_id: u8,
    /// Bus clocks since the previous request, or [`TIME_SENTINEL`].
    pub time: u32,
}

impl Record {
    /// Decodes the stored bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; RECORD_LEN]) -> Record {
        Record {
            addr: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            reqtype: ReqType::from_u8(b[4]),
            size: b[5],
            attr: b[6],
            proc_id: b[7],
            time: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        }
    }

    /// The stored bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[..4].copy_from_slice(&self.addr.to_le_bytes());
        b[4] = self.reqtype.to_u8();
        b[5] = self.size;
        b[6] = self.attr;
        b[7] = self.proc_id;
        b[8..].copy_from_slice(&self.time.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lookup table says what `DEFINED` says, for every byte: the 17 defined values by name,
    /// every other byte kept as `Unknown`, and each writes back as the byte it came from.
    #[test]
    fn req_type_table_matches_the_defined_list() {
        for v in 0..=255u8 {
            let t = ReqType::from_u8(v);
            match ReqType::DEFINED.iter().find(|d| d.1 == v) {
                Some(&(defined, _, name)) => assert_eq!((t, t.name()), (defined, name), "{v:#04x}"),
                None => assert_eq!(t, ReqType::Unknown(v)),
            }
            assert_eq!(t.to_u8(), v);
        }
    }
}
