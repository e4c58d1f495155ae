//! Reading and writing 12-byte `p2AddrTr` records: the fixed-record reader and writer shared
//! with the 6-byte format.

use super::record::{Record, RECORD_LEN};
use crate::sources::byu::read::FixedRecord;

/// Streams 12-byte records from an [`crate::sources::Input`].
pub type Reader = crate::sources::byu::read::FixedReader<Record>;

/// Writes 12-byte records, the same bytes the reader reads.
pub type Writer<W> = crate::sources::byu::read::FixedWriter<W, Record>;

impl FixedRecord for Record {
    const LEN: usize = RECORD_LEN;
    fn decode(bytes: &[u8]) -> Self {
        Record::from_bytes(bytes.try_into().expect("one record long"))
    }
    fn encode(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_bytes())
    }
}
