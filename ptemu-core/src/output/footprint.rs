//! Where the unit's output has been: the physical bytes it has already written, so that it can
//! count bytes overwritten and laps (spec/output.md, "Laps and overwrites").
//!
//! A *visit* is one run of consecutive stores into one region (a ToPA entry's region or the single
//! range) at rising, adjacent addresses; a region change or a jump back (END hop, wrap) starts the
//! next. A visit is compared with the bytes written before it only when it ends (or when the counts
//! are read), so a store costs two comparisons and the set of written bytes changes once per visit.

/// The written-bytes set and the counts derived from it.
#[derive(Clone, Debug, Default)]
pub(super) struct Footprint {
    /// Bytes written by closed visits: sorted, disjoint, non-adjacent half-open ranges.
    written: Vec<(u64, u64)>,
    /// The visit in progress.
    open: Option<Visit>,
    /// Bytes closed visits stored over bytes written before them.
    overwritten: u64,
    /// Laps counted at visit starts (see [`Footprint::totals`]).
    laps: u64,
    /// The region base where the first overwrite happened: each later visit into it is a lap.
    lap_mark: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Visit {
    region: u64,
    start: u64,
    end: u64,
}

impl Footprint {
    /// Records a store of `len` bytes at `pa` into the region based at `region`.
    #[inline]
    pub fn record(&mut self, region: u64, pa: u64, len: u64) {
        if let Some(v) = &mut self.open {
            if v.region == region && v.end == pa {
                v.end += len;
                return;
            }
        }
        self.close();
        if self.lap_mark == Some(region) {
            self.laps += 1;
        }
        self.open = Some(Visit {
            region,
            start: pa,
            end: pa + len,
        });
    }

    /// (laps, bytes overwritten) so far, counting the visit in progress.
    pub fn totals(&self) -> (u64, u64) {
        let Some(v) = self.open else {
            return (self.laps, self.overwritten);
        };
        let over = overlap(&self.written, v.start, v.end);
        let first_lap = u64::from(over > 0 && self.lap_mark.is_none());
        (self.laps + first_lap, self.overwritten + over)
    }

    /// Ends the visit in progress: counts its overwrites and adds its bytes to the set.
    fn close(&mut self) {
        let Some(v) = self.open.take() else { return };
        let over = overlap(&self.written, v.start, v.end);
        if over > 0 {
            self.overwritten += over;
            if self.lap_mark.is_none() {
                self.lap_mark = Some(v.region);
                self.laps = 1;
            }
        }
        insert(&mut self.written, v.start, v.end);
    }
}

/// Bytes of `[start, end)` inside `set`.
fn overlap(set: &[(u64, u64)], start: u64, end: u64) -> u64 {
    let first = set.partition_point(|&(_, e)| e <= start);
    set[first..]
        .iter()
        .take_while(|&&(s, _)| s < end)
        .map(|&(s, e)| e.min(end) - s.max(start))
        .sum()
}

/// Adds `[start, end)` to `set`, merging what it touches.
fn insert(set: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start == end {
        return;
    }
    if let Some(last) = set.last_mut() {
        if last.1 == start {
            last.1 = end;
            return;
        }
    }
    let first = set.partition_point(|&(_, e)| e < start);
    let past = first + set[first..].iter().take_while(|&&(s, _)| s <= end).count();
    if first == past {
        set.insert(first, (start, end));
    } else {
        let merged = (set[first].0.min(start), set[past - 1].1.max(end));
        set.splice(first..past, [merged]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn insert_merges_touching_and_overlapping_ranges() {
        let mut s = Vec::new();
        insert(&mut s, 10, 20);
        insert(&mut s, 30, 40);
        insert(&mut s, 0, 5);
        assert_eq!(s, [(0, 5), (10, 20), (30, 40)]);
        insert(&mut s, 20, 30);
        assert_eq!(s, [(0, 5), (10, 40)]);
        insert(&mut s, 3, 12);
        assert_eq!(s, [(0, 40)]);
        assert_eq!(overlap(&s, 35, 50), 5);
    }

    /// The range-set arithmetic against a set of single bytes, on pseudo-random stores.
    #[test]
    fn overwrites_match_a_set_of_bytes() {
        let mut f = Footprint::default();
        let mut bytes = BTreeSet::new();
        let mut over = 0;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (region, pa, len) = ((x % 4) * 64, x % 300, 1 + (x >> 20) % 40);
            f.record(region, pa, len);
            over += (pa..pa + len).filter(|&b| !bytes.insert(b)).count() as u64;
            assert_eq!(f.totals().1, over);
        }
        assert!(over > 0);
    }
}
