//! Writer: the framing gem5's `ProtoOutputStream` produces (magic, then varint32-length-delimited
//! messages, header first). It writes the uncompressed stream; for a `.gz` file as gem5 writes it,
//! wrap the output in a `flate2::write::GzEncoder` (the readers detect gzip by magic either way).

use super::messages::{InstDepRecord, Packet};
use super::read::{Header, Record, MAGIC};
use prost::Message;
use std::io::{self, Write};

/// Writes one gem5 proto trace to `W`.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Writes the magic and `header`.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        let mut w = Writer { out, buf: Vec::new() };
        match header {
            Header::Dep(h) => w.message(h)?,
            Header::Fetch(h) => w.message(h)?,
        }
        Ok(w)
    }

    /// Writes a dependency-trace record.
    pub fn write_dep(&mut self, record: &InstDepRecord) -> io::Result<()> {
        self.message(record)
    }

    /// Writes a packet-trace record.
    pub fn write_packet(&mut self, packet: &Packet) -> io::Result<()> {
        self.message(packet)
    }

    /// Writes a record of either kind.
    pub fn write_record(&mut self, record: Record<'_>) -> io::Result<()> {
        match record {
            Record::Dep(r) => self.message(r),
            Record::Fetch(p) => self.message(p),
        }
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    fn message(&mut self, m: &impl Message) -> io::Result<()> {
        self.buf.clear();
        m.encode_length_delimited(&mut self.buf)
            .map_err(io::Error::other)?;
        self.out.write_all(&self.buf)
    }
}
