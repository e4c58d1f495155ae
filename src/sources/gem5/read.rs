//! Streaming reader: the magic `gem5`, then varint32-length-delimited protobuf messages, the
//! header first. One body buffer and one decoded record of each kind are reused for every message.

use super::fast;
use super::messages::{
    required_tags, scan_fields, InstDepRecord, InstDepRecordHeader, Packet, PacketHeader, RecordType,
};
use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::varint::{self, Varint};
use crate::sources::Input;
use prost::Message;
use std::io::{self, BufRead, Read};

/// The 4 bytes every gem5 proto stream starts with (inside the gzip stream): LE u32 0x356d6567.
pub const MAGIC: [u8; 4] = *b"gem5";

/// The longest message the reader accepts; a longer length prefix means the framing is lost.
pub const MAX_MESSAGE: u64 = 1 << 20;

/// Which of the two gem5 trace kinds a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// Elastic data-dependency trace: [`InstDepRecordHeader`] + [`InstDepRecord`]s.
    Dep,
    /// Packet (instruction-fetch) trace: [`PacketHeader`] + [`Packet`]s.
    Fetch,
}

/// A trace's header message.
#[derive(Clone, Debug, PartialEq)]
pub enum Header {
    /// Elastic data-dependency trace.
    Dep(InstDepRecordHeader),
    /// Packet (fetch) trace.
    Fetch(PacketHeader),
}

impl Header {
    /// The trace kind.
    pub fn kind(&self) -> TraceKind {
        match self {
            Header::Dep(_) => TraceKind::Dep,
            Header::Fetch(_) => TraceKind::Fetch,
        }
    }

    /// Simulator ticks per second.
    pub fn tick_freq(&self) -> u64 {
        match self {
            Header::Dep(h) => h.tick_freq,
            Header::Fetch(h) => h.tick_freq,
        }
    }
}

/// One decoded record, borrowed from the reader until the next call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Record<'a> {
    /// A dependency-trace node.
    Dep(&'a InstDepRecord),
    /// A packet-trace request.
    Fetch(&'a Packet),
}

/// Reads a gem5 proto trace of either kind.
#[derive(Debug)]
pub struct Reader {
    input: Input,
    header: Header,
    body: Vec<u8>,
    dep: InstDepRecord,
    packet: Packet,
    offset: u64,
    records: u64,
    done: bool,
}

impl Reader {
    /// Reads the magic and the header; the header tells the kind (field 4 a varint: the dep
    /// header's window_size; field 4 length-delimited or absent: the packet header's id_strings).
    pub fn new(input: Input) -> Result<Reader> {
        let mut r = Reader {
            input,
            header: Header::Fetch(PacketHeader::default()),
            body: Vec::new(),
            dep: InstDepRecord::default(),
            packet: Packet::default(),
            offset: 0,
            records: 0,
            done: false,
        };
        let mut magic = [0u8; 4];
        let got = r.fill(&mut magic)?;
        if got < 4 || magic != MAGIC {
            return Err(r.error(
                0,
                ErrorKind::BadMagic,
                format!(
                    "not a gem5 proto trace: expected the magic \"gem5\" (67 65 6d 35), found {}",
                    if got == 0 {
                        "an empty file".to_string()
                    } else {
                        magic[..got]
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    }
                ),
            ));
        }
        r.offset = 4;
        let Some(start) = r.frame()? else {
            return Err(r.error(
                4,
                ErrorKind::Truncated,
                "the trace ends before its header message",
            ));
        };
        let body = &r.body[..];
        let Some(scan) = scan_fields(body) else {
            return Err(r.error(start, ErrorKind::BadField, "the header message does not decode"));
        };
        let (header, required) = if scan.field4_wire == Some(0) {
            let h = InstDepRecordHeader::decode(body).map(Header::Dep);
            (h, required_tags::DEP_HEADER)
        } else {
            (
                PacketHeader::decode(body).map(Header::Fetch),
                required_tags::PACKET_HEADER,
            )
        };
        let header = header.map_err(|e| {
            r.error(
                start,
                ErrorKind::BadField,
                format!("the header message does not decode: {e}"),
            )
        })?;
        if scan.present & required != required {
            return Err(r.error(
                start,
                ErrorKind::BadField,
                format!(
                    "the header lacks required field(s) {}",
                    missing(scan.present, required)
                ),
            ));
        }
        r.header = header;
        Ok(r)
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The trace kind.
    pub fn kind(&self) -> TraceKind {
        self.header.kind()
    }

    /// The input's name, as errors give it.
    pub fn name(&self) -> &str {
        self.input.name()
    }

    /// Bytes consumed so far (uncompressed, magic included).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Record messages read so far (bad ones included, the header not).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record, or `None` at a clean end (at a message boundary). A [`ErrorKind::BadField`]
    /// error leaves the reader at the next message, so a lenient caller may go on; after any other
    /// error the reader returns `None`.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>> {
        if self.done {
            return Ok(None);
        }
        let kind = self.header.kind();
        let start = self.offset;
        // In place when the length prefix and the whole body are in the input's buffer (always,
        // but at the end of a chunk, for a mapped or an inflated file): no copy into `body`.
        let placed = match self.input.fill_buf() {
            Ok(avail) => in_place(avail).map(|(prefix, len)| {
                let buf = &avail[prefix..];
                (
                    prefix + len,
                    decode_body(kind, buf, len, &mut self.dep, &mut self.packet),
                )
            }),
            // The framing below reads again and reports the error with its position.
            Err(_) => None,
        };
        let outcome = match placed {
            Some((n, outcome)) => {
                self.input.consume(n);
                self.offset += n as u64;
                outcome
            }
            None => match self.frame() {
                Ok(Some(_)) => {
                    decode_body(kind, &self.body, self.body.len(), &mut self.dep, &mut self.packet)
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            },
        };
        self.records += 1;
        if let Err(msg) = outcome {
            return Err(self.error(start, ErrorKind::BadField, msg));
        }
        Ok(Some(match kind {
            TraceKind::Dep => Record::Dep(&self.dep),
            TraceKind::Fetch => Record::Fetch(&self.packet),
        }))
    }

    /// Appends whole record messages, length prefixes and bodies, to `block` (empty), for a
    /// worker to decode (`super::ahead`, SIM20): the messages wholly in the input's buffer, as
    /// they are there, until the block holds at least `want` bytes; when there are none, the one
    /// message that runs past the buffer (or the end, or the error). So the block is never held
    /// back while the input waits. Returns `Ok(true)` while there may be more, `Ok(false)` at a
    /// clean end; an error is the framing or read error [`Reader::next_record`] returns there,
    /// after the messages before it, and ends the reader. Messages are counted in
    /// [`Reader::records`]; none is decoded.
    pub(super) fn take_block(&mut self, block: &mut Vec<u8>, want: usize) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let whole = match self.input.fill_buf() {
            Ok(avail) => {
                let (mut n, mut count) = (0, 0);
                while block.len() + n < want {
                    let Some((prefix, len)) = in_place(&avail[n..]) else {
                        break;
                    };
                    n += prefix + len;
                    count += 1;
                }
                block.extend_from_slice(&avail[..n]);
                self.records += count;
                n
            }
            // The framing below reads again and reports the error with its position.
            Err(_) => 0,
        };
        self.input.consume(whole);
        self.offset += whole as u64;
        if whole > 0 {
            // Reading on could wait for the input (the buffer is empty, or its next message
            // runs past it): the block goes as it is.
            return Ok(true);
        }
        match self.frame() {
            Ok(Some(_)) => {
                // Alone in its block, at the block's start: its prefix need not be the input's.
                prost::encoding::encode_varint(self.body.len() as u64, block);
                block.extend_from_slice(&self.body);
                self.records += 1;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Reads one length prefix and the body into `self.body`; returns the prefix's offset, or
    /// `None` at EOF before the prefix.
    fn frame(&mut self) -> Result<Option<u64>> {
        if self.done {
            return Ok(None);
        }
        let start = self.offset;
        let mut prefix = Varint::default();
        loop {
            let byte = match self.byte() {
                Ok(Some(b)) => b,
                Ok(None) if prefix.len == 0 => {
                    self.done = true;
                    return Ok(None);
                }
                Ok(None) => {
                    return Err(self.error(
                        start,
                        ErrorKind::Truncated,
                        "the input ends inside a message length prefix",
                    ))
                }
                Err(e) => return Err(SourceError::io(self.name(), Some(Position::Byte(self.offset)), e)),
            };
            if prefix.push(byte) {
                break;
            }
            if prefix.len == 5 {
                return Err(self.error(
                    start,
                    ErrorKind::LostFraming,
                    "the message length prefix is longer than a varint32",
                ));
            }
        }
        let len = prefix.value;
        if len > MAX_MESSAGE {
            return Err(self.error(
                start,
                ErrorKind::LostFraming,
                format!("message length {len} exceeds the {MAX_MESSAGE}-byte limit"),
            ));
        }
        let len = len as usize;
        let mut body = std::mem::take(&mut self.body);
        body.resize(len, 0);
        let got = self.fill(&mut body);
        self.body = body;
        let got = got?;
        if got < len {
            return Err(self.error(
                start,
                ErrorKind::Truncated,
                format!("a {len}-byte message runs past the end of the input ({got} bytes left)"),
            ));
        }
        Ok(Some(start))
    }

    /// One byte, or `None` at EOF.
    fn byte(&mut self) -> io::Result<Option<u8>> {
        // Interrupted reads never get here: `Input` reads again.
        let Some(&b) = self.input.fill_buf()?.first() else {
            return Ok(None);
        };
        self.input.consume(1);
        self.offset += 1;
        Ok(Some(b))
    }

    /// Fills `buf` as far as the input goes; returns the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    self.offset += n as u64;
                }
                Err(e) => return Err(SourceError::io(self.name(), Some(Position::Byte(self.offset)), e)),
            }
        }
        Ok(got)
    }

    fn error(&self, at: u64, kind: ErrorKind, msg: impl Into<String>) -> SourceError {
        SourceError::at(self.name(), Position::Byte(at), kind, msg)
    }
}

/// Decodes the record messages of `block`, which [`Reader::take_block`] took from byte `start`
/// of the `kind` trace named `name`, into `dep` or `packet`: calls `each` with every record, or
/// its [`ErrorKind::BadField`] error, in order, as [`Reader::next_record`] gives them, until it
/// returns `false`. Returns the bytes of the messages decoded.
pub(super) fn decode_block(
    kind: TraceKind,
    name: &str,
    block: &[u8],
    start: u64,
    dep: &mut InstDepRecord,
    packet: &mut Packet,
    mut each: impl FnMut(Result<Record<'_>>) -> bool,
) -> usize {
    let mut pos = 0;
    while let Some((prefix, len)) = in_place(&block[pos..]) {
        let at = pos;
        pos += prefix + len;
        let go_on = match decode_body(kind, &block[at + prefix..], len, dep, packet) {
            Ok(()) => each(Ok(match kind {
                TraceKind::Dep => Record::Dep(dep),
                TraceKind::Fetch => Record::Fetch(packet),
            })),
            Err(msg) => each(Err(SourceError::at(
                name,
                Position::Byte(start + at as u64),
                ErrorKind::BadField,
                msg,
            ))),
        };
        if !go_on {
            return pos;
        }
    }
    debug_assert_eq!(pos, block.len(), "a block holds whole messages");
    pos
}

/// The length prefix's size and the body's length of the message at the front of `avail`, when
/// both are wholly there; `None` sends the message through [`Reader::frame`] (which also reports
/// a bad prefix).
#[inline]
fn in_place(avail: &[u8]) -> Option<(usize, usize)> {
    // A varint32 prefix: at most 5 bytes.
    let (len, prefix) = varint::varint(avail, avail.len().min(5), 0)?;
    (len <= MAX_MESSAGE && (avail.len() - prefix) as u64 >= len).then_some((prefix, len as usize))
}

/// Decodes the record message `buf[..len]` of `kind` into `dep` or `packet` and checks it: the
/// fast path when it takes the message (it may load, never use, bytes past `len`), else prost.
/// `Err` is the text of the [`ErrorKind::BadField`] error.
fn decode_body(
    kind: TraceKind,
    buf: &[u8],
    len: usize,
    dep: &mut InstDepRecord,
    packet: &mut Packet,
) -> std::result::Result<(), String> {
    let (name, fast) = match kind {
        TraceKind::Dep => {
            dep.clear();
            ("InstDepRecord", fast::dep_record(buf, len, dep))
        }
        TraceKind::Fetch => {
            packet.clear();
            ("Packet", fast::packet(buf, len, packet))
        }
    };
    let body = &buf[..len];
    let present = match fast {
        Some(present) => present,
        None => {
            let decoded = match kind {
                TraceKind::Dep => {
                    dep.clear();
                    dep.merge(body)
                }
                TraceKind::Fetch => {
                    packet.clear();
                    packet.merge(body)
                }
            };
            match (decoded, scan_fields(body)) {
                (Ok(()), Some(scan)) => scan.present,
                (decoded, _) => {
                    let why = decoded
                        .err()
                        .map_or_else(|| "broken wire format".to_owned(), |e| e.to_string());
                    return Err(format!("{name} does not decode: {why}"));
                }
            }
        }
    };
    let (required, other, other_name) = match kind {
        TraceKind::Dep => (required_tags::DEP_RECORD, required_tags::PACKET, "a Packet"),
        TraceKind::Fetch => (
            required_tags::PACKET,
            required_tags::DEP_RECORD,
            "an InstDepRecord",
        ),
    };
    if present & required != required {
        let hint = if present & other == other {
            format!(" (it looks like {other_name}: the header and the records disagree)")
        } else {
            String::new()
        };
        return Err(format!(
            "{name} lacks required field(s) {}{hint}",
            missing(present, required)
        ));
    }
    if kind == TraceKind::Dep && RecordType::try_from(dep.r#type).is_err() {
        return Err(format!(
            "InstDepRecord type {} is not a RecordType (0 INVALID, 1 LOAD, 2 STORE, 3 COMP)",
            dep.r#type
        ));
    }
    Ok(())
}

/// The field numbers in `required` missing from `present`, e.g. "1, 7".
fn missing(present: u32, required: u32) -> String {
    let gone = required & !present;
    (0..32)
        .filter(|n| gone & (1 << n) != 0)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
