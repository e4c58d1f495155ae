//! The gem5 protobuf messages (proto2, `package ProtoMessage`), written by hand with gem5's field
//! numbers: `src/proto/inst_dep_record.proto` (elastic data-dependency trace) and
//! `src/proto/packet.proto` (instruction-fetch trace).
//!
//! `required` fields are always encoded; prost does not check their presence on decode, so the
//! reader checks them itself (see [`required_tags`]). Repeated scalars are written unpacked (the
//! proto2 default, as gem5 writes them); prost accepts packed ones on read too.

/// Header of an elastic data-dependency trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstDepRecordHeader {
    /// Name of the probe that wrote the trace (e.g. `system.cpu.traceListener`).
    #[prost(string, required, tag = "1")]
    pub obj_id: String,
    /// Format version; gem5 never sets it.
    #[prost(uint32, optional, tag = "2")]
    pub ver: Option<u32>,
    /// Simulator ticks per second (1e12: picoseconds).
    #[prost(uint64, required, tag = "3")]
    pub tick_freq: u64,
    /// Dependency window: 3 × the ROB entries.
    #[prost(uint32, required, tag = "4")]
    pub window_size: u32,
}

/// The kind of an [`InstDepRecord`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RecordType {
    /// Not a valid node (gem5 never writes it).
    Invalid = 0,
    /// A load.
    Load = 1,
    /// A store.
    Store = 2,
    /// A computation (no memory access).
    Comp = 3,
}

/// One committed micro-op of an elastic data-dependency trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstDepRecord {
    /// O3 dynamic sequence number.
    #[prost(uint64, required, tag = "1")]
    pub seq_num: u64,
    /// The node's kind ([`RecordType`] as i32).
    #[prost(enumeration = "RecordType", required, tag = "2")]
    pub r#type: i32,
    /// Physical address of a load or store.
    #[prost(uint64, optional, tag = "3")]
    pub p_addr: Option<u64>,
    /// Access size in bytes.
    #[prost(uint32, optional, tag = "4")]
    pub size: Option<u32>,
    /// Request flags of the access.
    #[prost(uint32, optional, tag = "5")]
    pub flags: Option<u32>,
    /// Order (ROB) dependencies: earlier sequence numbers.
    #[prost(uint64, repeated, packed = "false", tag = "6")]
    pub rob_dep: Vec<u64>,
    /// Ticks between the completion of the latest dependency and this node's execution.
    #[prost(uint64, required, tag = "7")]
    pub comp_delay: u64,
    /// Register (RAW) dependencies: earlier sequence numbers.
    #[prost(uint64, repeated, packed = "false", tag = "8")]
    pub reg_dep: Vec<u64>,
    /// Number of filtered-out COMP nodes before this node (absent: none).
    #[prost(uint32, optional, tag = "9")]
    pub weight: Option<u32>,
    /// Virtual PC of the instruction.
    #[prost(uint64, optional, tag = "10")]
    pub pc: Option<u64>,
    /// Virtual address of a load or store (when the probe's `traceVirtAddr` is set).
    #[prost(uint64, optional, tag = "11")]
    pub v_addr: Option<u64>,
    /// Address-space id (allowed by the schema, never written by gem5).
    #[prost(uint32, optional, tag = "12")]
    pub asid: Option<u32>,
}

/// One entry of [`PacketHeader::id_strings`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct IdStringEntry {
    /// Id.
    #[prost(uint32, optional, tag = "1")]
    pub key: Option<u32>,
    /// Its name.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// Header of a packet (instruction-fetch) trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PacketHeader {
    /// Name of the probe that wrote the trace.
    #[prost(string, required, tag = "1")]
    pub obj_id: String,
    /// Format version; gem5 never sets it.
    #[prost(uint32, optional, tag = "2")]
    pub ver: Option<u32>,
    /// Simulator ticks per second.
    #[prost(uint64, required, tag = "3")]
    pub tick_freq: u64,
    /// Id-to-name table (requestor ids).
    #[prost(message, repeated, tag = "4")]
    pub id_strings: Vec<IdStringEntry>,
}

/// One memory request of a packet trace (for the fetch trace: one instruction-fetch request).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Packet {
    /// Tick of the request.
    #[prost(uint64, required, tag = "1")]
    pub tick: u64,
    /// MemCmd (1 = ReadReq).
    #[prost(uint32, required, tag = "2")]
    pub cmd: u32,
    /// Physical address (of the fetch block).
    #[prost(uint64, required, tag = "3")]
    pub addr: u64,
    /// Size in bytes (the fetch buffer size).
    #[prost(uint32, required, tag = "4")]
    pub size: u32,
    /// Request flags (0x100 = INST_FETCH), truncated to 32 bits.
    #[prost(uint32, optional, tag = "5")]
    pub flags: Option<u32>,
    /// Packet id.
    #[prost(uint64, optional, tag = "6")]
    pub pkt_id: Option<u64>,
    /// Virtual PC of the instruction that triggered the request.
    #[prost(uint64, optional, tag = "7")]
    pub pc: Option<u64>,
}

/// Field numbers a message must hold, as a bit set (bit n = field n).
pub mod required_tags {
    /// [`super::InstDepRecordHeader`]: obj_id, tick_freq, window_size.
    pub const DEP_HEADER: u32 = 1 << 1 | 1 << 3 | 1 << 4;
    /// [`super::PacketHeader`]: obj_id, tick_freq.
    pub const PACKET_HEADER: u32 = 1 << 1 | 1 << 3;
    /// [`super::InstDepRecord`]: seq_num, type, comp_delay.
    pub const DEP_RECORD: u32 = 1 << 1 | 1 << 2 | 1 << 7;
    /// [`super::Packet`]: tick, cmd, addr, size.
    pub const PACKET: u32 = 1 << 1 | 1 << 2 | 1 << 3 | 1 << 4;
}

/// What a quick walk over a message's wire format found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldScan {
    /// Field numbers 1..=31 present (bit n = field n).
    pub present: u32,
    /// The wire type of the first field 4, if any.
    pub field4_wire: Option<u8>,
}

/// Walks the fields of an encoded message; `None` if the wire format is broken.
pub fn scan_fields(mut buf: &[u8]) -> Option<FieldScan> {
    let mut scan = FieldScan::default();
    while !buf.is_empty() {
        let key = take_varint(&mut buf)?;
        let (field, wire) = (key >> 3, (key & 7) as u8);
        if field == 0 {
            return None;
        }
        if field < 32 {
            scan.present |= 1 << field;
        }
        if field == 4 && scan.field4_wire.is_none() {
            scan.field4_wire = Some(wire);
        }
        let skip = match wire {
            0 => {
                take_varint(&mut buf)?;
                0
            }
            1 => 8,
            2 => usize::try_from(take_varint(&mut buf)?).ok()?,
            5 => 4,
            _ => return None,
        };
        buf = buf.get(skip..)?;
    }
    Some(scan)
}

/// Reads a base-128 varint (at most 10 bytes) from the front of `buf`.
fn take_varint(buf: &mut &[u8]) -> Option<u64> {
    let (value, next) = crate::sources::varint::read(buf, 0, 10)?;
    *buf = &buf[next..];
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn inst_dep_record_layout() {
        // seq 4, STORE, p_addr 0x2de58, size 8, flags 2, rob_dep 1, 2, comp_delay 1500, reg_dep 3,
        // weight 2, pc 0x7ffff7dd7c33, v_addr 0x601000 (gem5's field order, repeated unpacked).
        let bytes: &[u8] = &[
            0x08, 0x04, 0x10, 0x02, 0x18, 0xd8, 0xbc, 0x0b, 0x20, 0x08, 0x28, 0x02, 0x30, 0x01, 0x30, 0x02,
            0x38, 0xdc, 0x0b, 0x40, 0x03, 0x48, 0x02, 0x50, 0xb3, 0xf8, 0xf5, 0xbe, 0xff, 0xff, 0x1f, 0x58,
            0x80, 0xa0, 0x80, 0x03,
        ];
        let r = InstDepRecord::decode(bytes).unwrap();
        assert_eq!(
            r,
            InstDepRecord {
                seq_num: 4,
                r#type: RecordType::Store as i32,
                p_addr: Some(0x2de58),
                size: Some(8),
                flags: Some(2),
                rob_dep: vec![1, 2],
                comp_delay: 1500,
                reg_dep: vec![3],
                weight: Some(2),
                pc: Some(0x7fff_f7dd_7c33),
                v_addr: Some(0x60_1000),
                asid: None,
            }
        );
        assert_eq!(r.encode_to_vec(), bytes);
        let scan = scan_fields(bytes).unwrap();
        assert_eq!(
            scan.present & required_tags::DEP_RECORD,
            required_tags::DEP_RECORD
        );
        assert_eq!(scan.field4_wire, Some(0));

        // Packed rob_dep (wire type 2) decodes to the same record.
        let packed: &[u8] = &[0x08, 0x04, 0x10, 0x03, 0x32, 0x02, 0x01, 0x02, 0x38, 0x00];
        let p = InstDepRecord::decode(packed).unwrap();
        assert_eq!(p.rob_dep, vec![1, 2]);
        assert_eq!(p.r#type, RecordType::Comp as i32);
    }

    #[test]
    fn packet_layout() {
        // The fetch sample's third packet: tick 13500, ReadReq, addr 0x4c40, 64 bytes, flags 0x100,
        // pc 0x7ffff7dd7c3b.
        let bytes: &[u8] = &[
            0x08, 0xbc, 0x69, 0x10, 0x01, 0x18, 0xc0, 0x98, 0x01, 0x20, 0x40, 0x28, 0x80, 0x02, 0x38, 0xbb,
            0xf8, 0xf5, 0xbe, 0xff, 0xff, 0x1f,
        ];
        let p = Packet::decode(bytes).unwrap();
        assert_eq!(
            p,
            Packet {
                tick: 13500,
                cmd: 1,
                addr: 0x4c40,
                size: 64,
                flags: Some(0x100),
                pkt_id: None,
                pc: Some(0x7fff_f7dd_7c3b),
            }
        );
        assert_eq!(p.encode_to_vec(), bytes);
    }

    #[test]
    fn headers_differ_by_field_4() {
        let dep = InstDepRecordHeader {
            obj_id: "cpu".into(),
            ver: None,
            tick_freq: 1_000_000_000_000,
            window_size: 576,
        };
        let pkt = PacketHeader {
            obj_id: "cpu".into(),
            ver: None,
            tick_freq: 1_000_000_000_000,
            id_strings: vec![IdStringEntry {
                key: Some(0),
                value: Some("cpu.inst".into()),
            }],
        };
        assert_eq!(scan_fields(&dep.encode_to_vec()).unwrap().field4_wire, Some(0));
        assert_eq!(scan_fields(&pkt.encode_to_vec()).unwrap().field4_wire, Some(2));
        assert_eq!(scan_fields(&[0x08]), None, "truncated varint");
        assert_eq!(scan_fields(&[0x0a, 0x05, 0x61]), None, "length past the end");
    }
}
