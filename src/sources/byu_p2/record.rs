//! The BYU `p2AddrTr` record: 12 bytes, little-endian (`byutr.h`).

/// Bytes per record.
pub const RECORD_LEN: usize = 12;

/// The `time` value that is no delta (seen on the first record of real traces).
pub const TIME_SENTINEL: u32 = 0xffff_ffff;

/// The request type (`byutr.h`): the stored byte itself, so a record is its on-disk bytes and a
/// block of records decodes as one copy. The 17 values `byutr.h` defines are the associated
/// constants, named as there; any other byte is kept as read ([`ReqType::index`] is `None` for it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct ReqType(pub u8);

/// The stored byte and its `byutr.h` name, e.g. `ReqType(0x21 INTA)`: what a failing comparison
/// of records should show.
impl std::fmt::Debug for ReqType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReqType({:#04x} {})", self.0, self.name())
    }
}

impl ReqType {
    /// 0x00: instruction fetch.
    pub const FETCH: ReqType = ReqType(0x00);
    /// 0x01: memory read.
    pub const MEMREAD: ReqType = ReqType(0x01);
    /// 0x02: read for ownership.
    pub const MEMREADINV: ReqType = ReqType(0x02);
    /// 0x03: memory write.
    pub const MEMWRITE: ReqType = ReqType(0x03);
    /// 0x10: I/O read.
    pub const IOREAD: ReqType = ReqType(0x10);
    /// 0x11: I/O write.
    pub const IOWRITE: ReqType = ReqType(0x11);
    /// 0x20: deferred reply.
    pub const DEFERREPLY: ReqType = ReqType(0x20);
    /// 0x21: interrupt acknowledge.
    pub const INTA: ReqType = ReqType(0x21);
    /// 0x22: central agent response.
    pub const CNTRLAGNTRES: ReqType = ReqType(0x22);
    /// 0x23: branch trace record.
    pub const BRTRACEREC: ReqType = ReqType(0x23);
    /// 0x31: shutdown special cycle.
    pub const SHUTDOWN: ReqType = ReqType(0x31);
    /// 0x32: flush special cycle.
    pub const FLUSH: ReqType = ReqType(0x32);
    /// 0x33: halt special cycle.
    pub const HALT: ReqType = ReqType(0x33);
    /// 0x34: sync special cycle.
    pub const SYNC: ReqType = ReqType(0x34);
    /// 0x35: flush acknowledge special cycle.
    pub const FLUSHACK: ReqType = ReqType(0x35);
    /// 0x36: stop-clock acknowledge special cycle.
    pub const STOPCLKACK: ReqType = ReqType(0x36);
    /// 0x37: SMI acknowledge special cycle.
    pub const SMIACK: ReqType = ReqType(0x37);

    /// Every defined type with its `byutr.h` name.
    pub const DEFINED: [(ReqType, &'static str); 17] = [
        (ReqType::FETCH, "FETCH"),
        (ReqType::MEMREAD, "MEMREAD"),
        (ReqType::MEMREADINV, "MEMREADINV"),
        (ReqType::MEMWRITE, "MEMWRITE"),
        (ReqType::IOREAD, "IOREAD"),
        (ReqType::IOWRITE, "IOWRITE"),
        (ReqType::DEFERREPLY, "DEFERREPLY"),
        (ReqType::INTA, "INTA"),
        (ReqType::CNTRLAGNTRES, "CNTRLAGNTRES"),
        (ReqType::BRTRACEREC, "BRTRACEREC"),
        (ReqType::SHUTDOWN, "SHUTDOWN"),
        (ReqType::FLUSH, "FLUSH"),
        (ReqType::HALT, "HALT"),
        (ReqType::SYNC, "SYNC"),
        (ReqType::FLUSHACK, "FLUSHACK"),
        (ReqType::STOPCLKACK, "STOPCLKACK"),
        (ReqType::SMIACK, "SMIACK"),
    ];

    /// Index into [`ReqType::DEFINED`], `None` for a value `byutr.h` does not define: one lookup
    /// in a table built at compile time (the mapping's hot path).
    #[inline]
    pub fn index(self) -> Option<usize> {
        match INDEX_BY_VALUE[usize::from(self.0)] {
            NOT_DEFINED => None,
            i => Some(usize::from(i)),
        }
    }

    /// The `byutr.h` name, or "unknown".
    pub fn name(self) -> &'static str {
        self.index().map_or("unknown", |i| ReqType::DEFINED[i].1)
    }
}

const NOT_DEFINED: u8 = u8::MAX;

/// [`ReqType::index`] for every byte value.
const INDEX_BY_VALUE: [u8; 256] = {
    let mut t = [NOT_DEFINED; 256];
    let mut i = 0;
    while i < ReqType::DEFINED.len() {
        t[ReqType::DEFINED[i].0 .0 as usize] = i as u8;
        i += 1;
    }
    t
};

/// One 12-byte record, fields as stored. In memory it is laid out as on disk (`repr(C)`, no
/// padding), so on a little-endian host a block of records is decoded by copying its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
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
            reqtype: ReqType(b[4]),
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
        b[4] = self.reqtype.0;
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

    /// The index table says what `DEFINED` says, for every byte: the 17 defined values by name
    /// (each once), every other byte unknown.
    #[test]
    fn req_type_table_matches_the_defined_list() {
        for v in 0..=255u8 {
            let t = ReqType(v);
            match ReqType::DEFINED.iter().position(|d| d.0 == t) {
                Some(i) => assert_eq!(
                    (t.index(), t.name()),
                    (Some(i), ReqType::DEFINED[i].1),
                    "{v:#04x}"
                ),
                None => assert_eq!((t.index(), t.name()), (None, "unknown"), "{v:#04x}"),
            }
        }
        assert_eq!(format!("{:?}", ReqType::INTA), "ReqType(0x21 INTA)");
        assert_eq!(format!("{:?}", ReqType(0x42)), "ReqType(0x42 unknown)");
    }
}
