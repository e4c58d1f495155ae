//! Reading a whole trace through its mapping.

use ptemu::sources::{EventSource, SourceError, SourceStats};
use ptemu::Event;

/// Every event of a source, and its stats at the end.
pub fn drain(src: &mut dyn EventSource) -> Result<(Vec<Event>, SourceStats), SourceError> {
    let mut all = Vec::new();
    src.for_each_event(&mut |e| all.push(*e))?;
    Ok((all, src.stats()))
}
