//! The two 4 KiB page formats of Kangaroo, both made of checksummed objects ([`crate::object`]).
//!
//! - KLog page: `count u16 | object…`. Pages are filled in a segment buffer in DRAM, so the
//!   count goes first and objects are appended behind it.
//! - KSet set: `count u16 | rrip u8 × count | object…`. The RRIP predictions live on flash next
//!   to their objects (RRIParoo keeps only one hit bit per object in DRAM) and are rewritten
//!   only when the set is, so they cost no extra flash writes.
//!
//! A zeroed page (never written, trimmed) has count 0 and is empty. A page whose objects fail
//! their checksum is reported `corrupt`, and the objects before the damage are still returned.

use crate::object::{self, Decoded};

/// Page and set size (Table 3: 4 KB sets, flash's read/write unit).
pub const PAGE: usize = 4096;
const COUNT: usize = 2;

/// Bytes an object takes in a KLog page.
#[inline]
pub fn klog_cost(key: &[u8], value: &[u8]) -> usize {
    object::encoded_len(key, value)
}

/// Bytes an object takes in a KSet set (its RRIP byte included).
#[inline]
pub fn kset_cost(key: &[u8], value: &[u8]) -> usize {
    object::encoded_len(key, value) + 1
}

/// Whether an object can be stored at all: it must fit a set on its own.
pub fn fits(key: &[u8], value: &[u8]) -> bool {
    key.len() <= object::MAX_KEY && COUNT + kset_cost(key, value) <= PAGE
}

/// Usable bytes of a set for objects and their RRIP bytes.
pub const SET_CAPACITY: usize = PAGE - COUNT;

/// An object read back from flash, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// RRIP prediction: 0 = NEAR … 7 = FAR.
    pub rrip: u8,
}

impl Obj {
    pub fn kset_cost(&self) -> usize {
        kset_cost(&self.key, &self.value)
    }
}

/// Objects of one page.
#[derive(Debug, Default)]
pub struct Parsed<'a> {
    pub objs: Vec<Decoded<'a>>,
    /// RRIP byte of each object (KSet sets only; empty for KLog pages).
    pub rrip: Vec<u8>,
    /// Some object failed its checksum or the header did not add up.
    pub corrupt: bool,
}

fn count(page: &[u8]) -> usize {
    u16::from_le_bytes([page[0], page[1]]) as usize
}

/// Decodes `n` objects from `at`; `false` when one fails its checksum or bytes follow the
/// last one (pages are zero after their objects, so a damaged count cannot hide objects).
fn parse_objects<'a>(page: &'a [u8], mut at: usize, n: usize, out: &mut Parsed<'a>) -> bool {
    for _ in 0..n {
        match page.get(at..).map(object::decode) {
            Some(Ok(d)) => {
                at += d.len;
                out.objs.push(d);
            }
            _ => return false,
        }
    }
    zero_tail(page, at)
}

fn zero_tail(page: &[u8], at: usize) -> bool {
    page.get(at..).is_some_and(|t| t.iter().all(|&b| b == 0))
}

/// Parses a KLog page.
pub fn parse_klog(page: &[u8]) -> Parsed<'_> {
    let n = count(page);
    let mut out = Parsed::default();
    out.corrupt = !parse_objects(page, COUNT, n, &mut out);
    out
}

/// Parses a KSet set.
pub fn parse_kset(page: &[u8]) -> Parsed<'_> {
    let n = count(page);
    let mut out = Parsed::default();
    if COUNT + n > page.len() {
        out.corrupt = true;
        return out;
    }
    let ok = parse_objects(page, COUNT + n, n, &mut out);
    out.rrip = page[COUNT..COUNT + out.objs.len()].to_vec();
    out.corrupt = !ok;
    out
}

/// Finds `key` in a KSet set without checksumming the other objects: walks the length
/// headers and verifies only the object whose key matches. Returns its position and value;
/// `Err(())` when the set is damaged where the walk went (a miss, never wrong data). An
/// object found intact behind damaged ones is current: whenever a set's copy of a key must go,
/// [`super::kset::KSet::update`] rewrites the set from its readable part, damage included.
pub fn find_kset<'a>(page: &'a [u8], key: &[u8]) -> Result<Option<(usize, &'a [u8])>, ()> {
    let n = count(page);
    let mut at = COUNT + n;
    if at > page.len() {
        return Err(());
    }
    for i in 0..n {
        let h = page.get(at..at + object::HEADER).ok_or(())?;
        let klen = u16::from_le_bytes([h[4], h[5]]) as usize;
        let vlen = u32::from_le_bytes([h[6], h[7], h[8], h[9]]) as usize;
        let len = object::HEADER + klen + vlen;
        let body = page.get(at..at + len).ok_or(())?;
        if &body[object::HEADER..object::HEADER + klen] == key {
            let d = object::decode(body).map_err(|_| ())?;
            return Ok(Some((i, d.value)));
        }
        at += len;
    }
    if zero_tail(page, at) {
        Ok(None)
    } else {
        Err(())
    }
}

/// Starts an empty KLog page; returns the fill offset.
pub fn klog_init(page: &mut [u8]) -> usize {
    page[..COUNT].fill(0);
    COUNT
}

/// Appends an object to a KLog page filled up to `off`; returns the new fill offset, or `None`
/// when it does not fit.
pub fn klog_append(
    page: &mut [u8],
    off: usize,
    key: &[u8],
    value: &[u8],
    scratch: &mut Vec<u8>,
) -> Option<usize> {
    let len = klog_cost(key, value);
    if off + len > page.len() {
        return None;
    }
    scratch.clear();
    object::encode(key, value, scratch);
    page[off..off + len].copy_from_slice(scratch);
    let n = count(page) as u16 + 1;
    page[..COUNT].copy_from_slice(&n.to_le_bytes());
    Some(off + len)
}

/// Rewrites a KLog page without `key`; returns the new fill offset. Used when an object still
/// in the segment buffer is replaced or deleted, so no dead copy of it ever reaches flash.
pub fn klog_remove(page: &mut [u8], key: &[u8]) -> usize {
    let keep: Vec<(Vec<u8>, Vec<u8>)> = parse_klog(page)
        .objs
        .iter()
        .filter(|o| o.key != key)
        .map(|o| (o.key.to_vec(), o.value.to_vec()))
        .collect();
    page.fill(0);
    let mut off = klog_init(page);
    let mut scratch = Vec::new();
    for (k, v) in &keep {
        off = klog_append(page, off, k, v, &mut scratch).expect("a subset of a page fits the page");
    }
    off
}

/// Encodes a set from objects in on-flash order. The caller has checked they fit.
pub fn encode_kset(objs: &[Obj]) -> Vec<u8> {
    encode_kset_refs(&objs.iter().collect::<Vec<_>>())
}

/// [`encode_kset`] of objects held elsewhere.
pub fn encode_kset_refs(objs: &[&Obj]) -> Vec<u8> {
    let mut page = Vec::with_capacity(PAGE);
    page.extend_from_slice(&(objs.len() as u16).to_le_bytes());
    page.extend(objs.iter().map(|o| o.rrip));
    for o in objs {
        object::encode(&o.key, &o.value, &mut page);
    }
    debug_assert!(page.len() <= PAGE);
    page.resize(PAGE, 0);
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(k: &str, v: &str, rrip: u8) -> Obj {
        Obj {
            key: k.into(),
            value: v.into(),
            rrip,
        }
    }

    #[test]
    fn klog_page_append_parse_remove() {
        let mut page = vec![0u8; PAGE];
        let mut off = klog_init(&mut page);
        let mut s = Vec::new();
        for i in 0..3 {
            off = klog_append(&mut page, off, format!("k{i}").as_bytes(), b"v", &mut s).unwrap();
        }
        let p = parse_klog(&page);
        assert!(!p.corrupt);
        assert_eq!(p.objs.len(), 3);
        let off2 = klog_remove(&mut page, b"k1");
        assert!(off2 < off);
        let keys: Vec<_> = parse_klog(&page)
            .objs
            .iter()
            .map(|o| o.key.to_vec())
            .collect();
        assert_eq!(keys, vec![b"k0".to_vec(), b"k2".to_vec()]);
        assert!(klog_append(&mut page, PAGE - 5, b"k", b"v", &mut s).is_none());
    }

    #[test]
    fn kset_round_trip_and_corruption() {
        let objs = vec![obj("a", "1", 7), obj("b", "22", 0)];
        let mut page = encode_kset(&objs);
        let p = parse_kset(&page);
        assert!(!p.corrupt);
        assert_eq!(p.rrip, vec![7, 0]);
        assert_eq!(p.objs[1].value, b"22");
        page[20] ^= 0xff;
        let p = parse_kset(&page);
        assert!(p.corrupt);
        assert!(p.objs.len() < 2);
        assert!(find_kset(&page, b"b").is_err() || find_kset(&page, b"b").unwrap().is_none());
        let good = encode_kset(&objs);
        assert_eq!(find_kset(&good, b"b"), Ok(Some((1, &b"22"[..]))));
        assert_eq!(find_kset(&good, b"zz"), Ok(None));
        let mut bad_b = good.clone();
        let last = bad_b.iter().rposition(|&x| x == b'2').unwrap();
        bad_b[last] = b'3';
        assert_eq!(find_kset(&bad_b, b"b"), Err(()));
        assert!(!parse_kset(&[0u8; PAGE]).corrupt);
        assert!(parse_kset(&[0u8; PAGE]).objs.is_empty());
    }
}
