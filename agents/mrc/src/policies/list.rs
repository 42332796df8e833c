//! Doubly linked lists of cached objects in one slab, shared by the
//! linked-list policies (LRU, RRIP): O(1) move-to-head and unlink without a node allocation per
//! object (the full simulations run tens of caches over millions of keys).

pub(crate) const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub key: u64,
    pub weight: u64,
    prev: u32,
    next: u32,
    /// Which list the node is on.
    list: u8,
}

#[derive(Debug, Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
    len: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct Lists {
    nodes: Vec<Node>,
    free: Vec<u32>,
    ends: Vec<Ends>,
}

impl Lists {
    pub fn new(lists: usize) -> Self {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            ends: vec![
                Ends {
                    head: NIL,
                    tail: NIL,
                    len: 0
                };
                lists
            ],
        }
    }

    pub fn len(&self, list: u8) -> usize {
        self.ends[list as usize].len
    }

    pub fn tail(&self, list: u8) -> Option<u32> {
        let t = self.ends[list as usize].tail;
        (t != NIL).then_some(t)
    }

    /// New node at the head of `list`.
    pub fn push_head(&mut self, list: u8, key: u64, weight: u64) -> u32 {
        let node = Node {
            key,
            weight,
            prev: NIL,
            next: NIL,
            list,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.link_head(list, i);
        i
    }

    /// Unlink node `i` and free it.
    pub fn remove(&mut self, i: u32) -> Node {
        self.unlink(i);
        self.free.push(i);
        self.nodes[i as usize]
    }

    /// Move node `i` to the head of `list` (possibly another list).
    pub fn move_to_head(&mut self, i: u32, list: u8) {
        self.unlink(i);
        self.link_head(list, i);
    }

    fn link_head(&mut self, list: u8, i: u32) {
        let e = &mut self.ends[list as usize];
        let old = e.head;
        e.head = i;
        if old == NIL {
            e.tail = i;
        }
        e.len += 1;
        if old != NIL {
            self.nodes[old as usize].prev = i;
        }
        let n = &mut self.nodes[i as usize];
        n.prev = NIL;
        n.next = old;
        n.list = list;
    }

    fn unlink(&mut self, i: u32) {
        let Node {
            prev, next, list, ..
        } = self.nodes[i as usize];
        let e = &mut self.ends[list as usize];
        if prev == NIL {
            e.head = next;
        }
        if next == NIL {
            e.tail = prev;
        }
        e.len -= 1;
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }

    pub fn footprint_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.free.capacity() * 4
            + self.ends.capacity() * 16
    }
}

/// Bytes of a hashbrown map from its capacity (power-of-two buckets at most
/// 7/8 full, one control byte each).
pub(crate) fn map_bytes<K, V, S>(map: &std::collections::HashMap<K, V, S>) -> usize {
    if map.capacity() == 0 {
        return 0;
    }
    (map.capacity() * 8 / 7).next_power_of_two() * (std::mem::size_of::<(K, V)>() + 1)
}

/// Bytes of a hashbrown set, as [`map_bytes`].
pub(crate) fn set_bytes<K, S>(set: &std::collections::HashSet<K, S>) -> usize {
    if set.capacity() == 0 {
        return 0;
    }
    (set.capacity() * 8 / 7).next_power_of_two() * (std::mem::size_of::<K>() + 1)
}
