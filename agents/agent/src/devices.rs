//! The agent's flash devices, opened once at start: what the registration reports of them,
//! the shared handle the data path's flash cache stages write through, and the device
//! telemetry (host bytes, and media bytes per placement handle where the device measures).
//!
//! `--device NAME=[BACKEND:]PATH:SIZE`. BACKEND `measured` (the default for a file) stores the
//! data in the file and runs the simulated FDP SSD's FTL beside it, so DLWA under real IO is
//! measured (`lachesis_device::measured`); `uring` (the default for a block device) is the
//! plain io_uring backend, whose media writes nobody knows.

use lachesis_cache::SharedDevice;
use lachesis_device::measured::{MeasuredDevice, MeasuredOptions, MeasuredStatsReader};
use lachesis_device::uring::{UringConfig, UringDevice};
use lachesis_device::{BlockDevice, Placement};

use crate::bus::{Device, DeviceKind};
use crate::caps::{prepare_device, Backend, DeviceSpec};
use crate::telemetry::{DeviceTelemetry, HandleTelemetry};

/// One opened device.
pub struct OpenDevice {
    /// As registered.
    pub info: Device,
    /// What the flash cache stages write through.
    pub shared: SharedDevice,
    /// Statistics of a measuring device (None for the plain backend).
    measured: Option<MeasuredStatsReader>,
}

impl OpenDevice {
    /// The statistics of a measuring device (None for the plain backend).
    pub fn measured(&self) -> Option<&MeasuredStatsReader> {
        self.measured.as_ref()
    }
}

impl std::fmt::Debug for OpenDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenDevice")
            .field("info", &self.info)
            .finish()
    }
}

/// Prepares (creates sparse files) and opens every `--device`. A device that cannot be opened
/// is an error naming it: the agent does not start half-equipped.
pub fn open_all(specs: &[DeviceSpec]) -> Result<Vec<OpenDevice>, String> {
    specs.iter().map(open).collect()
}

fn open(spec: &DeviceSpec) -> Result<OpenDevice, String> {
    let mut info = prepare_device(spec)?;
    let err = |e: lachesis_device::Error| format!("device {}: {}: {e}", spec.name, info.path);
    let backend = spec.backend.unwrap_or(match info.kind {
        DeviceKind::File => Backend::Measured,
        _ => Backend::Uring,
    });
    let (shared, measured, geometry) = match backend {
        Backend::Measured => {
            if info.kind != DeviceKind::File {
                return Err(format!(
                    "device {}: the measuring backend keeps its data in a regular file; {} is not one (use uring:)",
                    spec.name, info.path
                ));
            }
            let dev = MeasuredDevice::open(&info.path, spec.size_bytes, MeasuredOptions::default())
                .map_err(err)?;
            let geometry = dev.geometry().clone();
            let stats = dev.stats_reader();
            (lachesis_cache::share(dev), Some(stats), geometry)
        }
        Backend::Uring => {
            let dev = UringDevice::open(
                &info.path,
                UringConfig {
                    // Stages take turns on the device under its lock: any thread may submit.
                    single_issuer: false,
                    ..Default::default()
                },
            )
            .map_err(err)?;
            let geometry = dev.geometry().clone();
            (lachesis_cache::share(dev), None, geometry)
        }
    };
    if measured.is_some() {
        info.kind = DeviceKind::Measured;
    }
    info.fdp = geometry.placement == Placement::Fdp;
    info.placement_handles = u32::from(geometry.placement_handles);
    info.reclaim_unit_bytes =
        (geometry.reclaim_unit_bytes > 0).then_some(geometry.reclaim_unit_bytes);
    info.size_bytes = geometry.capacity_bytes;
    Ok(OpenDevice {
        info,
        shared,
        measured,
    })
}

impl OpenDevice {
    /// This device's counters now (cumulative since the agent opened it).
    pub fn report(&self) -> Option<DeviceTelemetry> {
        let base = DeviceTelemetry {
            name: self.info.name.clone(),
            host_bytes_written: 0,
            media_bytes_written: None,
            kind: Some(self.info.kind),
            placement_handles: u16::try_from(self.info.placement_handles).ok(),
            reclaim_unit_bytes: self.info.reclaim_unit_bytes,
            handles: None,
        };
        match &self.measured {
            Some(m) => {
                let s = m.stats();
                Some(DeviceTelemetry {
                    host_bytes_written: s.host_bytes_written,
                    media_bytes_written: Some(s.media_bytes_written),
                    handles: Some(
                        s.handles
                            .iter()
                            .map(|h| HandleTelemetry {
                                handle: h.handle,
                                host_bytes_written: h.host_bytes_written,
                                media_bytes_written: Some(h.media_bytes_written),
                            })
                            .collect(),
                    ),
                    ..base
                })
            }
            // A block device's own counter (sysfs) covers everything written to it.
            None if self.info.kind == DeviceKind::Block => {
                crate::metrics_engine::device_reports(std::slice::from_ref(&self.info))
                    .into_iter()
                    .next()
            }
            None => None,
        }
    }
}

/// Every device's report (devices without counters are left out).
pub fn reports(devices: &[OpenDevice]) -> Vec<DeviceTelemetry> {
    devices.iter().filter_map(OpenDevice::report).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_device::PlacementHandle;

    #[test]
    fn a_file_opens_as_a_measuring_device_that_reports_per_handle() {
        let dir = tempfile::tempdir().unwrap();
        let spec = crate::caps::parse_device_spec(&format!(
            "flash0={}:64MiB",
            dir.path().join("f.img").display()
        ))
        .unwrap();
        let devs = open_all(&[spec]).unwrap();
        let d = &devs[0];
        assert_eq!(d.info.kind, DeviceKind::Measured);
        assert!(d.info.fdp && d.info.placement_handles > 1, "{:?}", d.info);
        let buf = lachesis_device::AlignedBuf::new(1 << 20).unwrap();
        lachesis_cache::dev::lock(&d.shared)
            .write(0, &buf, PlacementHandle(2))
            .unwrap();
        let r = reports(&devs);
        assert_eq!(r[0].host_bytes_written, 1 << 20);
        let h2 = r[0]
            .handles
            .as_ref()
            .unwrap()
            .iter()
            .find(|h| h.handle == 2)
            .unwrap();
        assert_eq!(h2.host_bytes_written, 1 << 20);
        assert!(r[0].media_bytes_written.unwrap() >= 1 << 20);
    }

    #[test]
    fn the_plain_backend_is_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let spec = crate::caps::parse_device_spec(&format!(
            "flash0=uring:{}:16MiB",
            dir.path().join("f.img").display()
        ))
        .unwrap();
        let devs = open_all(&[spec]).unwrap();
        assert_eq!(devs[0].info.kind, DeviceKind::File);
        assert!(!devs[0].info.fdp);
        assert!(
            reports(&devs).is_empty(),
            "a plain file has no counters of its own"
        );
    }
}
