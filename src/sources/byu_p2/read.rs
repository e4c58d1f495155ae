//! Reading and writing 12-byte `p2AddrTr` records: the fixed-record reader and writer shared
//! with the 6-byte format.

use super::record::{Record, RECORD_LEN};
use crate::sources::byu::read::fixed_record;

/// Streams 12-byte records from an [`crate::sources::Input`].
pub type Reader = crate::sources::byu::read::FixedReader<Record>;

/// Writes 12-byte records, the same bytes the reader reads.
pub type Writer<W> = crate::sources::byu::read::FixedWriter<W, Record>;

fixed_record!(Record, RECORD_LEN);
