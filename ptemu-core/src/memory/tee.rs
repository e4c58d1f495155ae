//! [`Tee`]: physical memory that also copies every store, in order, to a byte sink.

use super::{MemError, PhysMemory};
use std::io::{self, Write};

/// Wraps a [`PhysMemory`] and appends the data of every successful store to `sink`, in the order
/// the stores happen. Placed between the output unit and its memory, the sink receives exactly the
/// byte stream the unit accepted (W1, R1), wrap or not: what a decoder reads after stitching the
/// regions. Reads go to the inner memory only.
///
/// A failing sink does not fail the store: the first I/O error is kept, later data is not copied,
/// and [`Tee::finish`] returns the error.
#[derive(Debug)]
pub struct Tee<M, W> {
    inner: M,
    sink: W,
    copied: u64,
    error: Option<io::Error>,
}

impl<M: PhysMemory, W: Write> Tee<M, W> {
    /// `inner`, with every store copied to `sink`.
    pub fn new(inner: M, sink: W) -> Self {
        Tee {
            inner,
            sink,
            copied: 0,
            error: None,
        }
    }

    /// Bytes copied to the sink so far.
    pub fn copied(&self) -> u64 {
        self.copied
    }

    /// The wrapped memory.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Flushes the sink and gives back the memory and the sink, or the first I/O error.
    pub fn finish(mut self) -> Result<(M, W), io::Error> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.sink.flush()?;
        Ok((self.inner, self.sink))
    }
}

impl<M: PhysMemory, W: Write> PhysMemory for Tee<M, W> {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        self.inner.write(pa, data)?;
        if self.error.is_none() {
            match self.sink.write_all(data) {
                Ok(()) => self.copied += data.len() as u64,
                Err(e) => self.error = Some(e),
            }
        }
        Ok(())
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.inner.read(pa, buf)
    }

    fn may_hold_data(&self, pa: u64, len: u64) -> bool {
        self.inner.may_hold_data(pa, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SparseMemory;

    #[test]
    fn stores_reach_memory_and_sink_in_order() {
        let mut t = Tee::new(SparseMemory::new(), Vec::new());
        t.write(0x2000, b"abc").unwrap();
        t.write(0x1000, b"de").unwrap();
        assert_eq!(t.copied(), 5);
        let mut b = [0u8; 3];
        t.read(0x2000, &mut b).unwrap();
        assert_eq!(&b, b"abc");
        let (mem, sink) = t.finish().unwrap();
        assert_eq!(sink, b"abcde");
        let mut b = [0u8; 2];
        mem.read(0x1000, &mut b).unwrap();
        assert_eq!(&b, b"de");
    }

    #[derive(Debug)]
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failing_sink_keeps_the_store_and_reports_the_error_at_finish() {
        let mut t = Tee::new(SparseMemory::new(), Broken);
        t.write(0x10, b"x").unwrap();
        let mut b = [0u8; 1];
        t.read(0x10, &mut b).unwrap();
        assert_eq!(&b, b"x");
        assert_eq!(t.finish().unwrap_err().to_string(), "disk full");
    }
}
