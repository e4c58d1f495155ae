//! Scott Kaplan's page-image traces (1999): LRU behaviour sequences, one record per miss of an
//! M-page LRU memory, each with the fetched page's image and the evicted page's.

mod events;
mod gen;
mod read;
mod record;

pub use events::{evict_payload, KaplanEvents, FAULT_IP, HANDLER_IP, PF_VECTOR};
// The per-format generators are what `sources::generate` (`ptemu gen`) dispatches to, and what
// the tests call; `sources::generate` is the API.
#[doc(hidden)]
pub use gen::{generate, generate_with, references, GEN_MEMORY_PAGES};
pub use read::{Reader, Writer};
pub use record::{Evicted, Record, LONG_RECORD_LEN, PAGE_SIZE, SHORT_RECORD_LEN};
