//! The return-compression stack (pt-packets.md §5.3, rules RET1–RET3): 64 entries, the oldest
//! dropped when full, cleared at PSB and OVF.

/// Capacity of the stack hardware and decoders keep.
pub const RET_STACK_DEPTH: usize = 64;

/// A fixed ring of return addresses; no allocation.
#[derive(Clone, Debug)]
pub struct RetStack {
    slots: [u64; RET_STACK_DEPTH],
    /// Index of the next free slot.
    top: usize,
    len: usize,
}

impl Default for RetStack {
    fn default() -> Self {
        RetStack {
            slots: [0; RET_STACK_DEPTH],
            top: 0,
            len: 0,
        }
    }
}

impl RetStack {
    /// Pushes a return address; the oldest entry falls off when 64 are held.
    #[inline]
    pub fn push(&mut self, ip: u64) {
        self.slots[self.top] = ip;
        self.top = (self.top + 1) % RET_STACK_DEPTH;
        self.len = (self.len + 1).min(RET_STACK_DEPTH);
    }

    /// The most recent entry.
    #[inline]
    pub fn peek(&self) -> Option<u64> {
        (self.len > 0).then(|| self.slots[(self.top + RET_STACK_DEPTH - 1) % RET_STACK_DEPTH])
    }

    /// Removes the most recent entry.
    #[inline]
    pub fn pop(&mut self) -> Option<u64> {
        let v = self.peek()?;
        self.top = (self.top + RET_STACK_DEPTH - 1) % RET_STACK_DEPTH;
        self.len -= 1;
        Some(v)
    }

    /// Empties the stack.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entry_falls_off_at_65() {
        let mut s = RetStack::default();
        for i in 0..65u64 {
            s.push(i);
        }
        assert_eq!(s.len(), 64);
        for i in (1..65u64).rev() {
            assert_eq!(s.pop(), Some(i));
        }
        assert_eq!(s.pop(), None);
    }
}
