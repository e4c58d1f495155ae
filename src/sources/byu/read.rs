//! The BYU 6-byte record stream, read and written through the shared fixed-size framing
//! ([`crate::sources::fixed`]).

use super::record::{Record, RECORD_LEN};
use crate::sources::fixed::{fixed_record, FixedReader, FixedWriter};

fixed_record!(Record, RECORD_LEN, decode_all = super::block::decode_all);

/// Streams 6-byte records from an [`Input`](crate::sources::Input).
pub type Reader = FixedReader<Record>;

/// Writes 6-byte records, the same bytes the reader reads.
pub type Writer<W> = FixedWriter<W, Record>;
