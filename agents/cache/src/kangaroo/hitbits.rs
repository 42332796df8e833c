//! RRIParoo's DRAM hit bits (§5.4): one row of bits per set, all in one bitmap, so their DRAM
//! is exactly the bits they hold. Bit `i` of a set's row says the object at position `i` was
//! read since the set was last written.

/// `rows` rows of `width` bits each.
pub struct BitTable {
    words: Vec<u64>,
    width: usize,
}

impl BitTable {
    pub fn new(rows: usize, width: usize) -> BitTable {
        BitTable {
            words: vec![0; (rows * width).div_ceil(64)],
            width,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    #[inline]
    pub fn get(&self, row: usize, i: usize) -> bool {
        let b = row * self.width + i;
        self.words[b / 64] >> (b % 64) & 1 == 1
    }

    #[inline]
    pub fn set(&mut self, row: usize, i: usize) {
        let b = row * self.width + i;
        self.words[b / 64] |= 1 << (b % 64);
    }

    pub fn clear_row(&mut self, row: usize) {
        for i in 0..self.width {
            let b = row * self.width + i;
            self.words[b / 64] &= !(1 << (b % 64));
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.words.capacity() * 8
    }

    pub fn save(&self, e: &mut crate::persist::Enc) {
        e.u64s(&self.words);
    }

    /// Reads what [`BitTable::save`] wrote for a table of this size, changing nothing on an
    /// error.
    pub fn load(&mut self, d: &mut crate::persist::Dec) -> crate::Result<()> {
        let words = d.u64s("hit bits")?;
        if words.len() != self.words.len() {
            return Err(d.bad(format!(
                "{} hit-bit words for {}",
                words.len(),
                self.words.len()
            )));
        }
        self.words = words;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_rows_are_independent() {
        let mut t = BitTable::new(3, 20);
        t.set(1, 19);
        t.set(2, 0);
        assert!(t.get(1, 19) && t.get(2, 0) && !t.get(1, 0));
        t.clear_row(1);
        assert!(!t.get(1, 19) && t.get(2, 0));
    }
}
