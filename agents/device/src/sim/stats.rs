//! Counters of the simulated SSD and its FDP event log.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::nvme::logpage::{FdpEvent, FdpEventType, FdpStats, MediaReallocated};

use super::config::Layout;
use super::ftl::Writer;

/// Page-granular counters since the device was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Pages the host wrote.
    pub host_pages_written: u64,
    /// Pages garbage collection relocated (written again on media).
    pub gc_pages_written: u64,
    /// Reclaim units erased.
    pub rus_erased: u64,
    /// Garbage collection victims (units reclaimed, with or without moving data).
    pub gc_victims: u64,
    /// Pages the host read.
    pub host_pages_read: u64,
    /// Pages the host deallocated that held data.
    pub pages_deallocated: u64,
}

impl SimStats {
    /// Pages programmed on media: host writes plus relocations.
    pub fn media_pages_written(&self) -> u64 {
        self.host_pages_written + self.gc_pages_written
    }

    /// The FDP statistics log page these counters correspond to.
    pub fn fdp(&self, page_size: u32, pages_per_ru: u32) -> FdpStats {
        let ps = u128::from(page_size);
        FdpStats {
            host_bytes_written: u128::from(self.host_pages_written) * ps,
            media_bytes_written: u128::from(self.media_pages_written()) * ps,
            media_bytes_erased: u128::from(self.rus_erased) * u128::from(pages_per_ru) * ps,
        }
    }
}

/// Page-granular counters of one placement handle, kept when the simulator was built with
/// [`super::SimSsd::with_handle_accounting`]. Relocated pages are charged to the handle whose
/// host write put the data there, wherever garbage collection has moved it since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleCounters {
    /// Pages the host wrote through this handle.
    pub host_pages_written: u64,
    /// Pages of this handle's data garbage collection relocated.
    pub gc_pages_written: u64,
    /// Pages of this handle's data the host deallocated.
    pub pages_deallocated: u64,
    /// Logical pages whose current data this handle wrote (still mapped).
    pub valid_pages: u64,
}

impl HandleCounters {
    /// Pages programmed on media for this handle: host writes plus relocations.
    pub fn media_pages_written(&self) -> u64 {
        self.host_pages_written + self.gc_pages_written
    }
}

/// Bounded FDP event log, oldest first, plus a count of every event ever recorded.
#[derive(Debug)]
pub(crate) struct EventLog {
    cap: usize,
    events: VecDeque<FdpEvent>,
    pub(crate) media_reallocated_total: u64,
    pub(crate) invalid_placement_total: u64,
}

impl EventLog {
    pub(crate) fn new(cap: usize) -> EventLog {
        EventLog {
            cap,
            events: VecDeque::new(),
            media_reallocated_total: 0,
            invalid_placement_total: 0,
        }
    }

    fn push(&mut self, e: FdpEvent) {
        if self.cap == 0 {
            return;
        }
        if self.events.len() == self.cap {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// Garbage collection moved `moved` pages out of a unit; the record's count field is 16
    /// bits, so large moves are split over several records as a device would.
    pub(crate) fn media_reallocated(
        &mut self,
        layout: &Layout,
        group: u32,
        writer: Writer,
        moved: u32,
        lba: Option<u32>,
    ) {
        self.media_reallocated_total += 1;
        let (placement_id, location) = match writer {
            Writer::Host { ruh } => (
                Some(layout.placement_id(group, ruh)),
                Some((group as u16, ruh as u8)),
            ),
            // Relocated data of several handles may share a GC unit: no single handle to name.
            Writer::Gc => (None, None),
        };
        let ts = now_ms();
        let mut left = moved;
        let mut lba = lba.map(u64::from);
        while left > 0 {
            let n = left.min(u32::from(u16::MAX));
            self.push(FdpEvent {
                kind: FdpEventType::MediaReallocated,
                placement_id,
                timestamp_ms: ts,
                nsid: Some(1),
                location,
                reallocated: Some(MediaReallocated {
                    lbas_moved: n as u16,
                    lba: lba.take(),
                }),
            });
            left -= n;
        }
    }

    pub(crate) fn invalid_placement(&mut self, handle: u16) {
        self.invalid_placement_total += 1;
        self.push(FdpEvent {
            kind: FdpEventType::InvalidPlacementId,
            placement_id: Some(handle),
            timestamp_ms: now_ms(),
            nsid: Some(1),
            location: None,
            reallocated: None,
        });
    }

    pub(crate) fn snapshot(&self) -> Vec<FdpEvent> {
        self.events.iter().copied().collect()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
